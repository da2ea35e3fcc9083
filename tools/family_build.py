"""Per-source nvcc flags for setup.py: the sm90 family's translation units (sm90_*.cu) are compiled
for sm_90a alone, every other .cu with the plain archs (tools/build_config.py).

Why a build_ext subclass: torch's BuildExtension gives every .cu one flag set. The alternatives
were (a) compiling the sm90 units first in a pre-step of our own and handing them over as
extra_objects, which runs two schedulers one after the other (the Hopper units, the longest to
compile, then everything else: about a minute more wall time on the 16-core host, where the
default build must stay under 5 minutes), or (b) this: one ninja run for all sources, where the
build edges of the sm90 units get their own `cuda_post_cflags` (a per-edge variable, standard
ninja). Ninja then schedules every unit with MAX_JOBS together, reads nvcc's depfiles and rebuilds
an edge when its command line changes, so incremental builds stay right when flags change. The same
patch puts the compile edges in longest-first order (UNIT_SECONDS), in every build, and the build prints
when each object started and finished (report_unit_times).

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

_EDGE = re.compile(r"^build (?P<obj>\S(?:\S|\$ )*): (?P<rule>cuda_compile|compile) (?P<src>\S(?:\S|\$ )*)$")

# Compile seconds of a unit by its stem (regex, seconds; the first match counts): patch_ninja starts the
# longest first (longest-processing-time order), so the last minute of the build is not one long unit
# started late. Measured (twenty-third session, 2-core machine, 2 jobs, the default build's 85 objects for
# archs 90;90a, `flash_attn_cuda build: unit` lines): sm80 backward d <= 128 63-74 s, d > 128 55-62 s;
# sm90 backward 49-64 s; forward (both families) 40-48 s; decode 22-32 s; binding*.cpp 16-24 s; the
# dispatchers 14-21 s; kvcache_* 8 s; dropout_mask 1 s (default 10). Simulated with those durations and 16
# jobs: 232 s against 239 s for the name order that ninja was given before (sm90 units first, then by
# name), the ideal 226 s; 24 jobs 160 against 172 s.
UNIT_SECONDS = (
    (r"^bwd_hdim(32|64|96|128)_", 68), (r"^bwd_hdim", 58), (r"^sm90_bwd_", 58), (r"^(sm90_)?fwd_hdim", 45),
    (r"^decode_", 25), (r"^binding", 20), (r"_dispatch$", 17), (r"^kvcache_", 8),
)


def compile_seconds(source: str) -> float:
    """Estimated compile time of a source (.cu / .cpp path) from UNIT_SECONDS."""
    stem = os.path.splitext(os.path.basename(source))[0]
    return next((seconds for pattern, seconds in UNIT_SECONDS if re.search(pattern, stem)), 10)


def sm90_nvcc_flags(flags: list[str]) -> list[str]:
    """An nvcc flag list for an sm90 unit: every -gencode of `flags` dropped, the sm90 family's
    flags (sm_90a SASS, extended wgmma shapes) appended."""
    return [f for f in flags if not f.startswith("-gencode")] + list(build_config.SM90_NVCC_FLAGS)


def patch_ninja(text: str, gencode: list[str]) -> str:
    """build.ninja text with (1) a `cuda_post_cflags` override on each sm90 unit's edge: the global
    value with the run of `gencode` flags replaced by the sm90 flags; (2) the compile edges in
    longest-first order (compile_seconds; distutils sorts the sources by name, and ninja starts edges in
    file order). Raises RuntimeError when there are sm90 units and the file does not look like torch's
    (no global cuda_post_cflags, or gencode not in it)."""
    lines = text.splitlines()
    edges = [(i, m) for i, m in ((i, _EDGE.match(line)) for i, line in enumerate(lines)) if m]
    if not edges:
        return text
    sources = [m.group("src").replace("$ ", " ") for _, m in edges]
    sm90 = [gen_instantiations.source_family(src) == "sm90" for src in sources]
    override = None
    if any(sm90):
        globals_ = [line for line in lines if line.startswith("cuda_post_cflags = ")]
        old = " ".join(shlex.quote(f) for f in gencode)
        if len(globals_) != 1 or f" {old} " not in f" {globals_[0]} ":
            raise RuntimeError("flash_attn_cuda build: torch's build.ninja has no global cuda_post_cflags holding "
                               f"{old!r}; cannot give the sm90 units their flags (tools/family_build.py)")
        override = "  " + globals_[0].replace(old, " ".join(shlex.quote(f) for f in build_config.SM90_NVCC_FLAGS))
    blocks = [[lines[i]] + ([override] if is_sm90 else []) for (i, _), is_sm90 in zip(edges, sm90)]
    costs = [compile_seconds(src) for src in sources]
    ordered = [line for k in sorted(range(len(blocks)), key=lambda k: -costs[k]) for line in blocks[k]]
    edge_lines = {i for i, _ in edges}
    rest = [line for i, line in enumerate(lines) if i not in edge_lines]
    first = edges[0][0]
    return "\n".join(rest[:first] + ordered + rest[first:]) + "\n"


def ninja_log_units(text: str) -> list[tuple[str, float, float]]:
    """(object file name, start s, end s) of each edge of the last build recorded in a .ninja_log
    (v5+: start_ms, end_ms, mtime, output, hash per line; a rebuilt edge appears again, the last line
    counts), in start order."""
    units = {}
    for line in text.splitlines():
        fields = line.split("\t")
        if line.startswith("#") or len(fields) < 4 or not (fields[0].isdigit() and fields[1].isdigit()):
            continue  # a header, or a line cut by the offset report_unit_times starts at
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
            # ninja may have compacted the log during the build (then every entry is read)
            f.seek(since if since <= os.fstat(f.fileno()).st_size else 0)
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
    sm90_*.cu with the sm90 flags (`gencode` is the plain -gencode run every other .cu gets) and, with
    ninja, the longest units first (patch_ninja)."""
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
