// What bench_fwd and bench_bwd share: the command line, dense parameters, random inputs, NaN
// poisoning, error reductions and CUDA-event timing. Needs only params.h; the benchmarks reach
// the kernel library through flash_api.h themselves (the tuning build of bench_fwd links none
// of it, so nothing here may call it).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

#include "params.h"
#include "sm90_tile_counter.h"

#define CUDA_CHECK(expr)                                                                     \
  do {                                                                                       \
    cudaError_t err_ = (expr);                                                               \
    if (err_ != cudaSuccess) {                                                               \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(err_)); \
      std::exit(bench::kExitError);                                                          \
    }                                                                                        \
  } while (0)

namespace bench {

// Exit codes of both benchmarks (benchmarks/cpp/check_matrix.sh counts 3 as skipped).
constexpr int kExitOk = 0;
constexpr int kExitMismatch = 1;     // --check found a wrong (or unwritten, or NaN) value
constexpr int kExitError = 2;        // bad arguments, no GPU, a failed CUDA call
constexpr int kExitUnsupported = 3;  // head dim / dtype not compiled, or too little shared memory here

// ---------------------------------------------------------------- COMMAND LINE

struct Options {
  int batch = 4, seqlen = 4096, seqlen_k = -1, heads = 16, hdim = 128, reps = 50;
  bool causal = false, check = false, grid = false;
  bool deterministic = false;           // bench_bwd only
  flash::FwdFamily family = flash::FwdFamily::kAuto;  // bench_fwd only: --family sm80|sm90|auto
  bool help = false, list_compiled = false;
  flash::DType dtype = flash::DType::kBFloat16;

  int sk() const { return seqlen_k > 0 ? seqlen_k : seqlen; }  // seqlen_k <= 0: same as seqlen
};

inline const char* dtype_name(flash::DType t) { return t == flash::DType::kBFloat16 ? "bf16" : "fp16"; }

// A whole decimal int, or false.
inline bool parse_int(const char* s, int& out) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(s, &end, 10);
  if (end == s || *end != '\0' || errno == ERANGE || v < INT32_MIN || v > INT32_MAX) return false;
  out = int(v);
  return true;
}

// Fills `o` from argv; 0 on success, kExitError (with a message on stderr) otherwise. --help and
// --compiled only set o.help / o.list_compiled: the caller prints and exits 0. `--deterministic`
// is accepted only with with_deterministic (bench_bwd), `--family` only with with_family (bench_fwd).
inline int parse(int argc, char** argv, Options& o, const char* prog, bool with_deterministic,
                 bool with_family = false) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) { std::fprintf(stderr, "missing value after %s\n", a.c_str()); std::exit(kExitError); }
      return argv[++i];
    };
    auto int_arg = [&](int& field) {
      const char* v = next();
      if (parse_int(v, field)) return true;
      std::fprintf(stderr, "%s: expected an integer, got %s\n", a.c_str(), v);
      return false;
    };
    int causal = 0;
    if (a == "--batch") { if (!int_arg(o.batch)) return kExitError; }
    else if (a == "--seqlen") { if (!int_arg(o.seqlen)) return kExitError; }
    else if (a == "--seqlen-k") { if (!int_arg(o.seqlen_k)) return kExitError; }
    else if (a == "--heads") { if (!int_arg(o.heads)) return kExitError; }
    else if (a == "--hdim") { if (!int_arg(o.hdim)) return kExitError; }
    else if (a == "--reps") { if (!int_arg(o.reps)) return kExitError; }
    else if (a == "--causal") {
      if (!int_arg(causal)) return kExitError;
      o.causal = causal != 0;
    } else if (a == "--dtype") {
      const std::string t = next();
      if (t == "bf16") o.dtype = flash::DType::kBFloat16;
      else if (t == "fp16") o.dtype = flash::DType::kFloat16;
      else { std::fprintf(stderr, "--dtype: bf16 or fp16, got %s\n", t.c_str()); return kExitError; }
    } else if (a == "--family" && with_family) {
      const std::string f = next();
      if (f == "sm80") o.family = flash::FwdFamily::kSm80;
      else if (f == "sm90") o.family = flash::FwdFamily::kSm90;
      else if (f == "auto") o.family = flash::FwdFamily::kAuto;
      else { std::fprintf(stderr, "--family: sm80, sm90 or auto, got %s\n", f.c_str()); return kExitError; }
    } else if (a == "--check") o.check = true;
    else if (a == "--grid") o.grid = true;
    else if (a == "--deterministic" && with_deterministic) o.deterministic = true;
    else if (a == "--compiled") o.list_compiled = true;
    else if (a == "--help" || a == "-h") o.help = true;
    else { std::fprintf(stderr, "unknown argument %s (see %s --help)\n", a.c_str(), prog); return kExitError; }
  }
  if (o.batch < 1 || o.seqlen < 1 || o.heads < 1 || o.hdim < 8 || o.hdim % 8 || o.hdim > 256 || o.reps < 1) {
    std::fprintf(stderr, "bad sizes: batch, seqlen, heads >= 1; hdim a multiple of 8 in [8, 256]\n");
    return kExitError;
  }
  return 0;
}

// --grid: the FA2-paper grid for o.hdim (batch * seqlen = 16k, hidden 2048, seqlen 512..16k,
// causal and not); otherwise just o.
inline std::vector<Options> runs_for(const Options& o) {
  if (!o.grid) return {o};
  std::vector<Options> runs;
  for (int causal = 0; causal < 2; ++causal) {
    for (int s = 512; s <= 16384; s *= 2) {
      Options g = o;
      g.seqlen = s, g.seqlen_k = -1, g.batch = 16384 / s, g.heads = 2048 / o.hdim, g.causal = causal;
      runs.push_back(g);
    }
  }
  return runs;
}

// --compiled: what this binary can run, one line each, for scripts and tests.
inline void print_compiled(const std::vector<int>& hdims, const std::vector<flash::DType>& dtypes) {
  std::printf("hdims");
  for (int d : hdims) std::printf(" %d", d);
  std::printf("\ndtypes");
  for (flash::DType t : dtypes) std::printf(" %s", dtype_name(t));
  std::printf("\n");
}

// kExitUnsupported with a message when a build with these head dims and dtypes has no kernel for
// o's head dim (none >= it) or dtype.
inline int check_compiled(const Options& o, const char* prog, const std::vector<int>& hdims,
                          const std::vector<flash::DType>& dtypes) {
  if (std::none_of(hdims.begin(), hdims.end(), [&](int d) { return d >= o.hdim; })) {
    std::fprintf(stderr, "%s: head dim %d is not compiled into this build (largest: %d; see --compiled)\n", prog,
                 o.hdim, hdims.empty() ? 0 : *std::max_element(hdims.begin(), hdims.end()));
    return kExitUnsupported;
  }
  if (std::find(dtypes.begin(), dtypes.end(), o.dtype) == dtypes.end()) {
    std::fprintf(stderr, "%s: dtype %s is not compiled into this build (see --compiled)\n", prog,
                 dtype_name(o.dtype));
    return kExitUnsupported;
  }
  return 0;
}

// Exits kExitError with "<prog>: no CUDA GPU found" when there is none.
inline void require_gpu(const char* prog) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "%s: no CUDA GPU found\n", prog);
    std::exit(kExitError);
  }
}

// ---------------------------------------------------------------- PARAMETERS

// Dense contiguous q, out: (batch, seqlen_q, heads, hdim); k, v: (batch, seqlen_k, heads, hdim);
// lse: (batch, heads, seqlen_q). softmax_scale 1/sqrt(hdim); causal = window_right 0.
inline flash::FwdParams dense_fwd_params(const Options& o, const void* q, const void* k, const void* v, void* out,
                                         float* lse, int headdim_rounded) {
  const int sk = o.sk();
  flash::FwdParams p;
  p.q_ptr = q, p.k_ptr = k, p.v_ptr = v, p.o_ptr = out, p.lse_ptr = lse;
  const int64_t row = int64_t(o.heads) * o.hdim;
  p.q_batch_stride = row * o.seqlen, p.q_row_stride = row, p.q_head_stride = o.hdim;
  p.k_batch_stride = row * sk, p.k_row_stride = row, p.k_head_stride = o.hdim;
  p.v_batch_stride = row * sk, p.v_row_stride = row, p.v_head_stride = o.hdim;
  p.o_batch_stride = row * o.seqlen, p.o_row_stride = row, p.o_head_stride = o.hdim;
  p.batch = o.batch, p.seqlen_q = o.seqlen, p.seqlen_k = sk, p.nheads = o.heads, p.nheads_k = o.heads;
  p.headdim = o.hdim;
  p.headdim_rounded = headdim_rounded;
  p.softmax_scale = 1.f / std::sqrt(float(o.hdim));
  p.scale_log2 = p.softmax_scale * float(M_LOG2E);
  p.window_right = o.causal ? 0 : -1;
  p.dtype = o.dtype;
  p.family = o.family;
  p.sm90_tiles.counter = sm90_tile_counter();
  return p;
}

// ---------------------------------------------------------------- KERNELS: inputs and comparisons

template <typename T>
__device__ __forceinline__ T from_float(float x) {
  if constexpr (std::is_same_v<T, __half>) return __float2half(x);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __float2bfloat16(x);
  else return x;
}
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(float x) { return x; }

// Uniform [-1, 1) from a hash of the index: reproducible, never all zeros.
template <typename T>
__global__ void fill_random(T* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ (seed * 0x9E3779B9u) ^ uint32_t(i >> 32);
    h ^= h >> 16; h *= 0x85EBCA6Bu; h ^= h >> 13; h *= 0xC2B2AE35u; h ^= h >> 16;
    p[i] = from_float<T>(float(h) / 2147483648.0f - 1.0f);
  }
}

template <typename T>
__global__ void fill_nan(T* p, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    p[i] = from_float<T>(NAN);
  }
}

// result[0] = max(result[0], max_i |a[i] - ref[i]|); NaN in a counts as infinitely wrong.
template <typename T>
__global__ void max_abs_diff(const T* a, const float* ref, size_t n, float* result) {
  float worst = 0.f;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float x = to_float(a[i]);
    const float diff = (x != x) ? INFINITY : fabsf(x - ref[i]);  // NaN = unwritten or broken
    worst = fmaxf(worst, diff);
  }
  atomicMax(reinterpret_cast<int*>(result), __float_as_int(worst));  // non-negative floats order as ints
}

// ---------------------------------------------------------------- TIMING

// Median of `reps` CUDA-event timings of enqueue() on the default stream, after 5 warm-up
// calls. enqueue() launches work and returns its cudaError_t.
template <typename Enqueue>
double median_ms(Enqueue&& enqueue, int reps) {
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < 5; ++i) CUDA_CHECK(enqueue());  // warm-up
  std::vector<float> times;
  for (int i = 0; i < reps; ++i) {
    CUDA_CHECK(cudaEventRecord(start));
    CUDA_CHECK(enqueue());
    CUDA_CHECK(cudaEventRecord(stop));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms);
  }
  std::sort(times.begin(), times.end());
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  return times[times.size() / 2];
}

}  // namespace bench
