"""Build flags of flash_attn_cuda, parsed from the environment (torch-free, importable by
setup.py before anything is built, and by the CPU tests).

    FLASH_ATTN_CUDA_ARCHS   "80;90"        compute capabilities (sm_XX) to compile for
    FLASH_ATTN_CUDA_HDIMS   all            head dims to compile, from 32,64,96,128,160,192,224,256
    FLASH_ATTN_CUDA_DTYPES  "fp16,bf16"    element types to compile
    FLASH_ATTN_CUDA_BACKWARD  "1"          0: forward only (half the kernels; .backward() raises)
    FLASH_ATTN_CUDA_FEATURES  "1"          0: no window/softcap/ALiBi/varlen kernels (half the kernels;
                                           those options raise)
    FLASH_ATTN_CUDA_KVCACHE   "1"          0: no KV-cache (decode) kernels; attention_with_kvcache raises
    MAX_JOBS / NVCC_THREADS                parallel compile jobs / nvcc threads per job; MAX_JOBS unset:
                                           one per core, at most one per MEM_PER_JOB_GIB of available
                                           memory (max_jobs)

Lists accept ',' or ';' or spaces as separators.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Mapping

ALL_HEAD_DIMS: tuple[int, ...] = (32, 64, 96, 128, 160, 192, 224, 256)
ALL_DTYPES: tuple[str, ...] = ("fp16", "bf16")
DEFAULT_ARCHS: tuple[int, ...] = (80, 90)
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


def _split(value: str) -> list[str]:
    return [tok for tok in re.split(r"[,;\s]+", value.strip()) if tok]


def parse_archs(value: str | None) -> tuple[int, ...]:
    if value is None or not value.strip():
        return DEFAULT_ARCHS
    archs = set()
    for tok in _split(value):
        m = re.fullmatch(r"(?:sm_?)?(\d)\.?(\d)", tok.lower())
        if not m:
            raise ValueError(f"FLASH_ATTN_CUDA_ARCHS: expected compute capabilities like '80;90' or "
                             f"'8.0;9.0', got {tok!r}")
        arch = int(m.group(1) + m.group(2))
        if arch < MIN_ARCH:
            raise ValueError(f"FLASH_ATTN_CUDA_ARCHS: sm_{arch} is older than sm_{MIN_ARCH}, which the "
                             f"kernels need (cp.async, bf16 tensor cores)")
        archs.add(arch)
    return tuple(sorted(archs))


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


def from_env(env: Mapping[str, str]) -> BuildConfig:
    return BuildConfig(
        archs=parse_archs(env.get("FLASH_ATTN_CUDA_ARCHS")),
        head_dims=parse_head_dims(env.get("FLASH_ATTN_CUDA_HDIMS")),
        dtypes=parse_dtypes(env.get("FLASH_ATTN_CUDA_DTYPES")),
        backward=parse_bool("FLASH_ATTN_CUDA_BACKWARD", env.get("FLASH_ATTN_CUDA_BACKWARD"), True),
        features=parse_bool("FLASH_ATTN_CUDA_FEATURES", env.get("FLASH_ATTN_CUDA_FEATURES"), True),
        kvcache=parse_bool("FLASH_ATTN_CUDA_KVCACHE", env.get("FLASH_ATTN_CUDA_KVCACHE"), True),
    )


def directions(cfg: BuildConfig) -> tuple[str, ...]:
    """Kernel families of instantiation files this build compiles (tools/gen_instantiations.py)."""
    return ("fwd",) + (("bwd",) if cfg.backward else ()) + (("decode",) if cfg.kvcache else ())


def compile_defines(cfg: BuildConfig) -> list[str]:
    """-D flags every source (C++ and CUDA, extension and C++ benchmarks) is compiled with."""
    return ((["-DFLASH_ATTN_CUDA_BACKWARD"] if cfg.backward else []) +
            ([] if cfg.features else ["-DFLASH_ATTN_CUDA_NO_FEATURES"]))


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
