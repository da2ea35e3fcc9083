"""Build flags of flash_attn_cuda, parsed from the environment (torch-free, importable by
setup.py before anything is built, and by the CPU tests).

    FLASH_ATTN_CUDA_ARCHS   see below      compute capabilities (sm_XX) to compile for; "90a" adds the
                                           Hopper forward family (sm90), compiled for sm_90a only
    FLASH_ATTN_CUDA_HDIMS   all            head dims to compile, from 32,64,96,128,160,192,224,256
    FLASH_ATTN_CUDA_DTYPES  "fp16,bf16"    element types to compile
    FLASH_ATTN_CUDA_BACKWARD  "1"          0: forward only (half the kernels; .backward() raises)
    FLASH_ATTN_CUDA_FEATURES  "1"          0: no window/softcap/ALiBi/varlen kernels (half the kernels;
                                           those options raise)
    FLASH_ATTN_CUDA_KVCACHE   "1"          0: no KV-cache (decode) kernels; attention_with_kvcache raises
    FLASH_ATTN_CUDA_SMEM_TILES "auto"      the small-memory tiles (the 163 KB / 99 KB rows of the tile
                                           tables: A100, sm86/sm89): auto builds them when an arch below
                                           9.0 is listed (a 9.0-only build never launches them), 1 always
                                           (the H200 runs them under FLASH_ATTN_CUDA_SMEM_BUDGET), 0 never
    FLASH_ATTN_CUDA_SM90_PERSISTENT "1"     which sm90 forward kernel the sm90 units compile: 1 the persistent
                                           one (csrc/sm90/fwd_persistent.h: one CTA per SM looping over the
                                           tiles, causal longest first), 0 the one-CTA-per-tile one
                                           (fwd_kernel.h), both: the two (twice the kernels in those units;
                                           benchmarks and bit-identity tests pick one per call with the
                                           runtime knob FLASH_ATTN_CUDA_SM90_PERSISTENT_CTAS)
    FLASH_ATTN_CUDA_SM90_SHORT_CAUSAL "1"  1: a second sm90 causal d = 64 forward kernel (128 x 128, two consumer
                                           warpgroups; units sm90_fwd_hdim64_<dtype>_short_causal.cu) for
                                           causal calls of <= 1k query rows (sm90/fwd_api.h
                                           fwd_short_causal); 0: the one causal tile for every length
    MAX_JOBS / NVCC_THREADS                parallel compile jobs / nvcc threads per job; MAX_JOBS unset:
                                           one per core, at most one per MEM_PER_JOB_GIB of available
                                           memory (max_jobs)

Lists accept ',' or ';' or spaces as separators.

Archs (resolve_archs), by PyTorch's extension convention: FLASH_ATTN_CUDA_ARCHS if set, else
TORCH_CUDA_ARCH_LIST ("8.0;9.0a", "9.0+PTX"; archs below 8.0 dropped), else the visible GPUs' archs
(compute capability 9.0 -> "90;90a"), else, with no GPU visible, the full default "80;90;90a".
Two kernel families: sm80 (every kernel; built for the plain archs) and sm90 (the Hopper forward,
head dims 64/128/256; built when 90a is listed, for sm_90a alone, since sm_90a code runs on 9.0
only). "90a" alone means "90;90a": the sm80 family (backward, decode, every fallback) needs an arch.
"""
from __future__ import annotations

import dataclasses
import os
import re
import sys
from typing import Callable, Mapping, Sequence

ALL_HEAD_DIMS: tuple[int, ...] = (32, 64, 96, 128, 160, 192, 224, 256)
ALL_DTYPES: tuple[str, ...] = ("fp16", "bf16")
DEFAULT_ARCHS: tuple[int, ...] = (80, 90)  # plain archs of the full default (no GPU visible) ...
DEFAULT_SM90A = True                      # ... plus 90a: "80;90;90a"
# The Hopper forward family (csrc/sm90/): its head dims, and the flags of its translation units
# (only those): sm_90a SASS (wgmma, setmaxnreg; compiled for plain sm_90 every HGMMA silently
# becomes a trap), no PTX (arch-specific PTX runs on 9.0 only), and the extended wgmma N sizes
# (176/144/80; without the macro CuTe's selector silently falls back to 64x16x16).
SM90_HEAD_DIMS: tuple[int, ...] = (64, 128, 256)
SM90_BWD_HEAD_DIMS: tuple[int, ...] = (64, 128, 256)  # the Hopper backward (csrc/sm90/bwd_*.h)
SM90_NVCC_FLAGS: tuple[str, ...] = ("-gencode=arch=compute_90a,code=sm_90a", "-DCUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED")
MIN_ARCH = 80  # the kernels use sm80 instructions (cp.async, bf16 MMA)
MEM_PER_JOB_GIB = 5  # nvcc's front end peaks at 3.6-4.5 GB on one backward instantiation

_DTYPE_ALIASES = {
    "fp16": "fp16", "float16": "fp16", "half": "fp16",
    "bf16": "bf16", "bfloat16": "bf16",
}


@dataclasses.dataclass(frozen=True)
class BuildConfig:
    archs: tuple[int, ...]
    head_dims: tuple[int, ...]
    dtypes: tuple[str, ...]
    backward: bool = False
    features: bool = True
    kvcache: bool = True
    sm90a: bool = False  # 90a listed: the sm90 forward family is built
    smem_tiles: bool = True  # the 163 / 99 KB tile rows are built (parse_smem_tiles)
    sm90_persistent: bool = True  # the persistent sm90 forward kernel is built (parse_sm90_persistent)
    sm90_one_tile: bool = False  # the one-CTA-per-tile sm90 forward kernel is built
    sm90_short_causal: bool = False  # the d = 64 short causal sm90 forward kernel is built


def _split(value: str) -> list[str]:
    return [tok for tok in re.split(r"[,;\s]+", value.strip()) if tok]


def parse_arch_list(value: str, name: str = "FLASH_ATTN_CUDA_ARCHS") -> tuple[tuple[int, ...], bool]:
    """(plain archs, whether 90a is listed) of an arch list: "80;90;90a", "8.0 9.0a", "sm_90a".
    TORCH_CUDA_ARCH_LIST's forms are accepted too: "+PTX" (PTX of the newest plain arch is always
    embedded), and there archs below sm_80 are dropped (that variable serves every extension)."""
    archs, sm90a, torch_list = set(), False, name == "TORCH_CUDA_ARCH_LIST"
    for tok in _split(value):
        m = re.fullmatch(r"(?:sm_?|compute_)?(\d{1,2})\.?(\d)(a?)(?:\+ptx)?", tok.lower())
        if not m:
            raise ValueError(f"{name}: expected compute capabilities like '80;90;90a' or '8.0;9.0a', got {tok!r}")
        arch = int(m.group(1) + m.group(2))
        if m.group(3):
            if arch != 90:
                raise ValueError(f"{name}: only 90a has arch-specific kernels (the sm90 forward family), got {tok!r}")
            sm90a = True
            arch = 90  # "90a" implies "90": the sm80 family needs an arch on this GPU too
        if arch < MIN_ARCH:
            if torch_list:
                continue
            raise ValueError(f"{name}: sm_{arch} is older than sm_{MIN_ARCH}, which the "
                             f"kernels need (cp.async, bf16 tensor cores)")
        archs.add(arch)
    if not archs:
        raise ValueError(f"{name}: no arch of sm_{MIN_ARCH} or newer in {value!r}")
    return tuple(sorted(archs)), sm90a


def parse_archs(value: str | None) -> tuple[int, ...]:
    """The plain archs of FLASH_ATTN_CUDA_ARCHS (the full default's when unset)."""
    if value is None or not value.strip():
        return DEFAULT_ARCHS
    return parse_arch_list(value)[0]


def visible_gpu_capabilities() -> list[tuple[int, int]]:
    """Compute capabilities of the GPUs this process sees, as PyTorch's extension builder finds them
    (torch.cuda; CUDA_VISIBLE_DEVICES applies); [] without torch, a driver or a GPU."""
    try:
        import torch
    except ImportError:
        return []
    try:
        if not torch.cuda.is_available():
            return []
        return [tuple(torch.cuda.get_device_capability(i)) for i in range(torch.cuda.device_count())]
    except RuntimeError:
        return []


def archs_of_gpus(capabilities: Sequence[tuple[int, int]]) -> tuple[tuple[int, ...], bool]:
    """(plain archs, 90a) for these GPUs: each one's own arch, and 90a for compute capability 9.0.
    GPUs older than sm_80 are left out (the kernels cannot run there); none left: ((), False)."""
    archs = {major * 10 + minor for major, minor in capabilities if major * 10 + minor >= MIN_ARCH}
    return tuple(sorted(archs)), 90 in archs


def format_archs(archs: Sequence[int], sm90a: bool) -> str:
    """The FLASH_ATTN_CUDA_ARCHS spelling: "80;90;90a"."""
    return ";".join([str(a) for a in archs] + (["90a"] if sm90a else []))


def resolve_archs(env: Mapping[str, str], probe: Callable[[], Sequence[tuple[int, int]]] | None = None
                  ) -> tuple[tuple[int, ...], bool, str]:
    """(plain archs, 90a, where they came from) by PyTorch's convention: FLASH_ATTN_CUDA_ARCHS, else
    TORCH_CUDA_ARCH_LIST, else the visible GPUs (probe; default visible_gpu_capabilities), else the
    full default. TORCH_CUDA_ARCH_LIST=native means the visible GPUs, as in PyTorch."""
    for name in ("FLASH_ATTN_CUDA_ARCHS", "TORCH_CUDA_ARCH_LIST"):
        value = env.get(name, "")
        if value.strip() and value.strip().lower() != "native":
            archs, sm90a = parse_arch_list(value, name)
            return archs, sm90a, f"{name}={value.strip()}"
    capabilities = list((probe or visible_gpu_capabilities)())
    archs, sm90a = archs_of_gpus(capabilities)
    if archs:
        seen = ", ".join(f"{major}.{minor}" for major, minor in capabilities)
        return archs, sm90a, f"the visible GPUs (compute capability {seen})"
    why = "no GPU visible" if not capabilities else "no visible GPU is sm_80 or newer"
    return DEFAULT_ARCHS, DEFAULT_SM90A, f"{why}: the full default"


def parse_head_dims(value: str | None) -> tuple[int, ...]:
    if value is None or not value.strip() or value.strip().lower() == "all":
        return ALL_HEAD_DIMS
    dims = set()
    for tok in _split(value):
        if not tok.isdigit() or int(tok) not in ALL_HEAD_DIMS:
            raise ValueError(f"FLASH_ATTN_CUDA_HDIMS: expected head dims from {list(ALL_HEAD_DIMS)}, "
                             f"got {tok!r}")
        dims.add(int(tok))
    return tuple(sorted(dims))


def parse_dtypes(value: str | None) -> tuple[str, ...]:
    if value is None or not value.strip() or value.strip().lower() == "all":
        return ALL_DTYPES
    dtypes = set()
    for tok in _split(value):
        if tok.lower() not in _DTYPE_ALIASES:
            raise ValueError(f"FLASH_ATTN_CUDA_DTYPES: expected some of fp16, bf16, got {tok!r}")
        dtypes.add(_DTYPE_ALIASES[tok.lower()])
    return tuple(d for d in ALL_DTYPES if d in dtypes)


def parse_bool(name: str, value: str | None, default: bool) -> bool:
    if value is None or not value.strip():
        return default
    v = value.strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{name}: expected 0/1 (or true/false), got {value!r}")


def parse_sm90_persistent(value: str | None) -> tuple[bool, bool]:
    """FLASH_ATTN_CUDA_SM90_PERSISTENT -> (persistent kernel built, one-tile kernel built): unset or 1 ->
    the persistent one (measured against the one-tile kernel: benchmarks/NOTES.md, "Tenth session"),
    0 -> the one-tile one, both -> the two."""
    if value is not None and value.strip().lower() == "both":
        return True, True
    try:
        persistent = parse_bool("FLASH_ATTN_CUDA_SM90_PERSISTENT", value, True)
    except ValueError:
        raise ValueError(f"FLASH_ATTN_CUDA_SM90_PERSISTENT: expected 1 (persistent), 0 (one CTA per tile) or both, "
                         f"got {value!r}") from None
    return persistent, not persistent


def parse_smem_tiles(value: str | None, archs: Sequence[int]) -> bool:
    """FLASH_ATTN_CUDA_SMEM_TILES: auto (unset) -> whether an arch below 90 is listed (only GPUs
    below 9.0 have less than 227 KB of shared memory per block), else 0/1."""
    if value is None or value.strip().lower() in ("", "auto"):
        return any(a < 90 for a in archs)
    return parse_bool("FLASH_ATTN_CUDA_SMEM_TILES", value, True)


def from_env(env: Mapping[str, str], probe: Callable[[], Sequence[tuple[int, int]]] | None = None) -> BuildConfig:
    """The build's flags; probe lists the visible GPUs' compute capabilities (resolve_archs)."""
    archs, sm90a, _ = resolve_archs(env, probe)
    sm90_persistent, sm90_one_tile = parse_sm90_persistent(env.get("FLASH_ATTN_CUDA_SM90_PERSISTENT"))
    return BuildConfig(
        archs=archs,
        sm90a=sm90a,
        head_dims=parse_head_dims(env.get("FLASH_ATTN_CUDA_HDIMS")),
        dtypes=parse_dtypes(env.get("FLASH_ATTN_CUDA_DTYPES")),
        backward=parse_bool("FLASH_ATTN_CUDA_BACKWARD", env.get("FLASH_ATTN_CUDA_BACKWARD"), True),
        features=parse_bool("FLASH_ATTN_CUDA_FEATURES", env.get("FLASH_ATTN_CUDA_FEATURES"), True),
        kvcache=parse_bool("FLASH_ATTN_CUDA_KVCACHE", env.get("FLASH_ATTN_CUDA_KVCACHE"), True),
        smem_tiles=parse_smem_tiles(env.get("FLASH_ATTN_CUDA_SMEM_TILES"), archs),
        sm90_persistent=sm90_persistent,
        sm90_one_tile=sm90_one_tile,
        sm90_short_causal=parse_bool("FLASH_ATTN_CUDA_SM90_SHORT_CAUSAL", env.get("FLASH_ATTN_CUDA_SM90_SHORT_CAUSAL"),
                                     True),
    )


def directions(cfg: BuildConfig) -> tuple[str, ...]:
    """Directions of instantiation files this build compiles (tools/gen_instantiations.py)."""
    return ("fwd",) + (("bwd",) if cfg.backward else ()) + (("decode",) if cfg.kvcache else ())


def families(cfg: BuildConfig) -> tuple[str, ...]:
    """Kernel families this build compiles: sm80 always, sm90 (the Hopper forward) with 90a."""
    return ("sm80",) + (("sm90",) if cfg.sm90a else ())


def family_gencode_flags(family: str, cfg: BuildConfig) -> list[str]:
    """The -gencode (and family -D) flags of a family's translation units: the plain archs for sm80
    (and every non-kernel source), sm_90a alone for sm90."""
    return list(SM90_NVCC_FLAGS) if family == "sm90" else nvcc_gencode_flags(cfg.archs)


def compile_defines(cfg: BuildConfig) -> list[str]:
    """-D flags every source (C++ and CUDA, extension and C++ benchmarks) is compiled with."""
    return ((["-DFLASH_ATTN_CUDA_BACKWARD"] if cfg.backward else []) +
            ([] if cfg.features else ["-DFLASH_ATTN_CUDA_NO_FEATURES"]) +
            ([] if cfg.smem_tiles else ["-DFLASH_ATTN_CUDA_NO_SMEM_TILES"]) +
            (["-DFLASH_ATTN_CUDA_SM90_PERSISTENT"] if cfg.sm90_persistent else []) +
            ([] if cfg.sm90_one_tile else ["-DFLASH_ATTN_CUDA_SM90_NO_ONE_TILE"]))


def nvcc_gencode_flags(archs: tuple[int, ...]) -> list[str]:
    """SASS for every arch, plus PTX of the newest so later GPUs can JIT it."""
    flags = [f"-gencode=arch=compute_{a},code=sm_{a}" for a in archs]
    flags.append(f"-gencode=arch=compute_{archs[-1]},code=compute_{archs[-1]}")
    return flags


def mem_available_bytes(meminfo: str) -> int | None:
    """MemAvailable of /proc/meminfo's text, in bytes; None when it is not there."""
    m = re.search(r"^MemAvailable:\s+(\d+) kB$", meminfo, re.MULTILINE)
    return int(m.group(1)) * 1024 if m else None


def max_jobs(env_value: str | None, nproc: int, mem_available: int | None) -> tuple[str, str]:
    """MAX_JOBS for the build, and a line saying where it came from. A set MAX_JOBS is kept; unset,
    one job per core, at most one per MEM_PER_JOB_GIB of available memory (all cores when that is
    unknown), at least one: too many jobs run the machine out of memory, not faster."""
    if env_value and env_value.strip():
        return env_value.strip(), f"MAX_JOBS={env_value.strip()} (from the environment)"
    nproc = max(1, nproc)
    if mem_available is None:
        return str(nproc), f"MAX_JOBS unset -> {nproc} jobs ({nproc} cores, available memory unknown)"
    gib = mem_available / 2 ** 30
    jobs = max(1, min(nproc, int(gib // MEM_PER_JOB_GIB)))
    return str(jobs), (f"MAX_JOBS unset -> {jobs} jobs ({nproc} cores, {gib:.0f} GiB available, "
                       f"~{MEM_PER_JOB_GIB} GiB per job)")


def main(argv: Sequence[str]) -> None:
    """For the Makefile: `build_config.py gencode|sm90-flags|defines|archs` prints that from the
    environment (sm90-flags: empty unless 90a is listed)."""
    cfg = from_env(os.environ)
    what = argv[1] if len(argv) > 1 else ""
    if what == "gencode":
        print(" ".join(family_gencode_flags("sm80", cfg)))
    elif what == "sm90-flags":
        print(" ".join(family_gencode_flags("sm90", cfg)) if cfg.sm90a else "")
    elif what == "defines":
        print(" ".join(compile_defines(cfg)))
    elif what == "archs":
        print(format_archs(cfg.archs, cfg.sm90a))
    else:
        sys.exit("usage: build_config.py gencode|sm90-flags|defines|archs")


if __name__ == "__main__":
    main(sys.argv)
