"""Backends for other libraries' attention registries (optional dependencies: each module imports
its library only when used)."""
