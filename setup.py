"""Build of flash_attn_cuda: one CUDA extension (flash_attn_cuda._C) compiled with ninja.

Build flags (environment; see tools/build_config.py and README "Build flags"):
  FLASH_ATTN_CUDA_ARCHS (unset: TORCH_CUDA_ARCH_LIST, else the visible GPUs, else "80;90;90a"; 90a adds
  the Hopper forward family, whose units get their own flags: tools/family_build.py)
  FLASH_ATTN_CUDA_HDIMS=all  FLASH_ATTN_CUDA_DTYPES=fp16,bf16
  MAX_JOBS (parallel nvcc jobs; unset: one per core and per 5 GiB of available memory),
  NVCC_THREADS (threads per nvcc), CUTLASS_DIR (CUTLASS checkout)
"""
import os
import pathlib
import shutil
import sys

from setuptools import find_packages, setup

ROOT = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "tools"))
import build_config  # noqa: E402
import family_build  # noqa: E402
import gen_instantiations  # noqa: E402
sys.path.insert(0, str(ROOT / "third_party"))
import find_cutlass  # noqa: E402

# nvcc may live outside PATH's idea of CUDA_HOME (e.g. /usr/local/bin/nvcc is a wrapper here).
if "CUDA_HOME" not in os.environ and "CUDA_PATH" not in os.environ and os.path.isdir("/usr/local/cuda"):
    os.environ["CUDA_HOME"] = "/usr/local/cuda"

from torch.utils.cpp_extension import BuildExtension, CUDAExtension  # noqa: E402

archs, sm90a, archs_why = build_config.resolve_archs(os.environ)
cfg = build_config.from_env({**os.environ, "FLASH_ATTN_CUDA_ARCHS": build_config.format_archs(archs, sm90a)})
# torch reads this when it adds arch flags itself; ours below take precedence, keep them in step.
os.environ["TORCH_CUDA_ARCH_LIST"] = ";".join([f"{a // 10}.{a % 10}" for a in cfg.archs] + (["9.0a"] if sm90a else []))

directions = build_config.directions(cfg)
instantiations = gen_instantiations.generate(ROOT / "csrc" / "instantiations", cfg.head_dims, cfg.dtypes, directions,
                                             build_config.families(cfg), cfg.smem_tiles, cfg.features,
                                             cfg.sm90_short_causal)
sources = ["csrc/binding.cpp", "csrc/binding_autograd.cpp", "csrc/fwd_dispatch.cu", "csrc/dropout_mask.cu"] + (["csrc/bwd_dispatch.cu"] if cfg.backward else [])
sources += ["csrc/binding_kvcache.cpp", "csrc/decode_dispatch.cu"] if cfg.kvcache else []
sources += [os.path.relpath(p, ROOT) for p in instantiations]
defines = build_config.compile_defines(cfg)

include_dirs = [str(ROOT / "csrc"), find_cutlass.include_dir()]
# The CUDA 13 pip wheels keep cuBLAS/cuSPARSE headers (needed by torch's headers) here.
for path in sys.path:
    cu13 = pathlib.Path(path) / "nvidia" / "cu13" / "include"
    if cu13.is_dir():
        include_dirs.append(str(cu13))
        break

nvcc_flags = [
    "-O3", "-std=c++20", "-DNDEBUG", "--use_fast_math", "--expt-relaxed-constexpr",
    "-lineinfo",  # source lines in SASS for profiling; no runtime cost
    "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
    "-U__CUDA_NO_BFLOAT16_OPERATORS__", "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
] + build_config.nvcc_gencode_flags(cfg.archs) + defines  # sm90_*.cu: gencode swapped (family_build)
if os.environ.get("NVCC_THREADS"):
    nvcc_flags += ["--threads", os.environ["NVCC_THREADS"]]
if os.environ.get("FLASH_ATTN_CUDA_PTXAS_VERBOSE"):
    nvcc_flags += ["-Xptxas", "-v"]

# Parallel nvcc jobs: torch's BuildExtension reads MAX_JOBS (unset, ninja runs cores + 2 jobs, and one
# backward instantiation's front end takes up to ~4.5 GB: many cores with little memory run out of it).
try:
    meminfo = pathlib.Path("/proc/meminfo").read_text()
except OSError:
    meminfo = ""
nproc = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
os.environ["MAX_JOBS"], jobs_why = build_config.max_jobs(os.environ.get("MAX_JOBS"), nproc,
                                                         build_config.mem_available_bytes(meminfo))
print(f"flash_attn_cuda build: {jobs_why}", flush=True)

print(f"flash_attn_cuda build: archs {build_config.format_archs(archs, sm90a)} ({archs_why})", flush=True)
print(f"flash_attn_cuda build: families={build_config.families(cfg)} head_dims={cfg.head_dims} dtypes={cfg.dtypes} backward={cfg.backward} "
      f"features={cfg.features} kvcache={cfg.kvcache} sm90_short_causal={cfg.sm90_short_causal} "
      f"cutlass={include_dirs[1]}", flush=True)

setup(
    name="flash_attn_cuda",
    version="0.1.0",
    description="FlashAttention-2 forward and backward kernels in CUTLASS/CuTe as a PyTorch extension",
    packages=find_packages(include=["flash_attn_cuda", "flash_attn_cuda.*"]),
    ext_modules=[
        CUDAExtension(
            name="flash_attn_cuda._C",
            sources=sources,
            include_dirs=include_dirs,
            extra_compile_args={"cxx": ["-O3", "-std=c++20"] + defines, "nvcc": nvcc_flags},
        )
    ],
    cmdclass={"build_ext": family_build.build_ext_class(
        BuildExtension.with_options(use_ninja=shutil.which("ninja") is not None),
        build_config.nvcc_gencode_flags(cfg.archs))},
    python_requires=">=3.10",
    install_requires=["torch>=2.4"],
    extras_require={"transformers": ["transformers>=4.53"]},  # flash_attn_cuda.integrations.transformers
    zip_safe=False,
)
