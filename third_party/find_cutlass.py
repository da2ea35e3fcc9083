"""Where the CUTLASS/CuTe headers come from.

1. CUTLASS_DIR (a CUTLASS checkout or install): $CUTLASS_DIR/include.
2. Otherwise the pinned pip wheel nvidia-cutlass==4.2.0.0, which ships the headers under
   cutlass_library/source/include (pip install --no-deps nvidia-cutlass==4.2.0.0: importing
   cutlass_library needs none of the wheel's dependencies).
"""
import os
import pathlib

PINNED_WHEEL = "nvidia-cutlass==4.2.0.0"


def include_dir() -> str:
    override = os.environ.get("CUTLASS_DIR")
    if override:
        inc = pathlib.Path(override) / "include"
        if not (inc / "cute" / "tensor.hpp").is_file():
            raise RuntimeError(f"CUTLASS_DIR={override}: no include/cute/tensor.hpp under it")
        return str(inc)
    try:
        import cutlass_library
    except ImportError as e:
        raise RuntimeError(f"CUTLASS headers not found: pip install --no-deps {PINNED_WHEEL}, or set CUTLASS_DIR "
                           f"to a CUTLASS checkout") from e
    inc = pathlib.Path(cutlass_library.__file__).resolve().parent / "source" / "include"
    if not (inc / "cute" / "tensor.hpp").is_file():
        raise RuntimeError(f"{inc} has no cute/tensor.hpp; reinstall {PINNED_WHEEL} or set CUTLASS_DIR")
    return str(inc)


if __name__ == "__main__":
    import sys
    try:
        print(include_dir())
    except RuntimeError as e:
        print(e, file=sys.stderr)
        sys.exit(1)
