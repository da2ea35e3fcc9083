"""Per-source nvcc flags for setup.py: the sm90 family's translation units (sm90_*.cu) are compiled
for sm_90a alone, every other .cu with the plain archs (tools/build_config.py).

Why a build_ext subclass: torch's BuildExtension gives every .cu one flag set. The alternatives
were (a) compiling the sm90 units first in a pre-step of our own and handing them over as
extra_objects, which runs two schedulers one after the other (the Hopper units, the longest to
compile, then everything else: about a minute more wall time on the 16-core host, where the
default build must stay under 5 minutes), or (b) this: one ninja run for all sources, where the
build edges of the sm90 units get their own `cuda_post_cflags` (a per-edge variable, standard
ninja). Ninja then schedules every unit with MAX_JOBS together, reads nvcc's depfiles and rebuilds
an edge when its command line changes, so incremental builds stay right when flags change.

torch writes build.ninja in _write_ninja_file (a private function, unchanged in form from torch
1.x to 2.14: `build OBJ: cuda_compile SRC` edges and a global `cuda_post_cflags = ...`): we wrap
it for the duration of our build and add the per-edge variable to the file it wrote. If its
format ever changes, patch_ninja raises instead of building sm90 code for the wrong arch (and
tools/check_sass.py fails on such objects too). Without ninja torch compiles file by file
through compiler._compile; there the flags of sm90 units are swapped in the call.
"""
from __future__ import annotations

import contextlib
import os
import re
import shlex
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import build_config  # noqa: E402
import gen_instantiations  # noqa: E402

_EDGE = re.compile(r"^build (?P<obj>\S(?:\S|\$ )*): cuda_compile (?P<src>\S(?:\S|\$ )*)$")


def sm90_nvcc_flags(flags: list[str]) -> list[str]:
    """An nvcc flag list for an sm90 unit: every -gencode of `flags` dropped, the sm90 family's
    flags (sm_90a SASS, extended wgmma shapes) appended."""
    return [f for f in flags if not f.startswith("-gencode")] + list(build_config.SM90_NVCC_FLAGS)


def patch_ninja(text: str, gencode: list[str]) -> str:
    """build.ninja text with a `cuda_post_cflags` override on each sm90 unit's edge: the global
    value with the run of `gencode` flags replaced by the sm90 flags. The sm90 edges move ahead of
    the other build edges (distutils sorts the sources by name, which would start the Hopper units,
    the longest to compile, last). Raises RuntimeError when the file does not look like torch's
    (no global cuda_post_cflags, or gencode not in it)."""
    lines = text.splitlines()
    globals_ = [line for line in lines if line.startswith("cuda_post_cflags = ")]
    old = " ".join(shlex.quote(f) for f in gencode)
    if len(globals_) != 1 or f" {old} " not in f" {globals_[0]} ":
        raise RuntimeError("flash_attn_cuda build: torch's build.ninja has no global cuda_post_cflags holding "
                           f"{old!r}; cannot give the sm90 units their flags (tools/family_build.py)")
    override = "  " + globals_[0].replace(old, " ".join(shlex.quote(f) for f in build_config.SM90_NVCC_FLAGS))
    sm90_edges, rest = [], []
    for line in lines:
        m = _EDGE.match(line)
        if m and gen_instantiations.source_family(m.group("src").replace("$ ", " ")) == "sm90":
            sm90_edges += [line, override]
        else:
            rest.append(line)
    first_edge = next((i for i, line in enumerate(rest) if line.startswith("build ")), len(rest))
    return "\n".join(rest[:first_edge] + sm90_edges + rest[first_edge:]) + "\n"


def ninja_log_units(text: str) -> list[tuple[str, float, float]]:
    """(object file name, start s, end s) of each edge of the last build recorded in a .ninja_log
    (v5+: start_ms, end_ms, mtime, output, hash per line; a rebuilt edge appears again, the last line
    counts), in start order."""
    units = {}
    for line in text.splitlines():
        fields = line.split("\t")
        if line.startswith("#") or len(fields) < 4:
            continue
        units[fields[3]] = (int(fields[0]) / 1000, int(fields[1]) / 1000)
    return sorted(((os.path.basename(o), s, e) for o, (s, e) in units.items()), key=lambda u: (u[1], u[0]))


def ninja_log_size(build_temp: str) -> int:
    try:
        return os.path.getsize(os.path.join(build_temp, ".ninja_log"))
    except OSError:
        return 0


def report_unit_times(build_temp: str, since: int) -> None:
    """Prints when each object this build compiled started and finished (s), from the lines ninja
    appended to build_temp's .ninja_log after byte `since`: build time is a product feature, and pip's
    editable build deletes the log."""
    try:
        with open(os.path.join(build_temp, ".ninja_log"), "rb") as f:
            f.seek(since)
            units = ninja_log_units(f.read().decode(errors="replace"))
    except OSError:
        return
    for name, start, end in units:
        print(f"flash_attn_cuda build: unit {name} {start:.1f}-{end:.1f} s ({end - start:.1f} s)", flush=True)


@contextlib.contextmanager
def _patched(module, name, replacement):
    original = getattr(module, name)
    setattr(module, name, replacement(original))
    try:
        yield
    finally:
        setattr(module, name, original)


def build_ext_class(base, gencode: list[str]):
    """A subclass of torch's BuildExtension (`base`, with its options applied) that compiles
    sm90_*.cu with the sm90 flags; `gencode` is the plain -gencode run every other .cu gets."""
    import torch.utils.cpp_extension as cpp_extension

    def wrap_write_ninja(write):
        def write_ninja_file(path, *args, **kwargs):
            write(path, *args, **kwargs)
            with open(path) as f:
                text = f.read()
            with open(path, "w") as f:
                f.write(patch_ninja(text, gencode))
        return write_ninja_file

    class FamilyBuildExtension(base):
        def build_extension(self, ext):
            log_size = ninja_log_size(self.build_temp)
            try:
                return self._build_extension(ext)
            finally:
                if self.use_ninja:
                    report_unit_times(self.build_temp, log_size)

        def _build_extension(self, ext):
            if not any(gen_instantiations.source_family(s) == "sm90" for s in ext.sources):
                return super().build_extension(ext)
            if self.use_ninja:
                with _patched(cpp_extension, "_write_ninja_file", wrap_write_ninja):
                    return super().build_extension(ext)
            compile_one = self.compiler._compile  # torch's per-file wrapper, set in build_extensions

            def _compile(obj, src, ext_, cc_args, extra_postargs, pp_opts):
                if gen_instantiations.source_family(src) == "sm90":
                    extra_postargs = dict(extra_postargs, nvcc=sm90_nvcc_flags(extra_postargs["nvcc"]))
                return compile_one(obj, src, ext_, cc_args, extra_postargs, pp_opts)
            self.compiler._compile = _compile
            try:
                return super().build_extension(ext)
            finally:
                self.compiler._compile = compile_one

    return FamilyBuildExtension
