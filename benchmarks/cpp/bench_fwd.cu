// bench_fwd: the forward kernel timed with no Python in the loop. Links only the torch-free
// kernel core (csrc/) and the CUDA runtime.
//
//   bench_fwd [--batch B] [--seqlen S] [--seqlen-k SK] [--heads H] [--hdim D] [--causal 0|1]
//             [--dtype bf16|fp16] [--reps N] [--check] [--grid]
//
// --grid runs the FA2-paper grid for --hdim (batch*seqlen = 16k, hidden 2048, seqlen 512..16k,
// causal and not). --check compares against a simple fp32 reference kernel on the same inputs
// and exits 1 on mismatch. Inputs are uniform random in [-1, 1) (never zeros), outputs are
// poisoned with NaN before every checked run.
//
// Tile-size tuning: compile with -DBENCH_HDIM=D -DBENCH_BM=BM -DBENCH_BN=BN -DBENCH_WARPS=W
// -DBENCH_SPLIT=0|1 to time FwdTraits<D, BM, BN, W, *, SPLIT> instead of the table in
// csrc/fwd_tile_config.h
// (benchmarks/cpp/tune_fwd.sh does this for a list of configs).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "flash_api.h"
#ifdef BENCH_HDIM
#include "fwd_launch.h"
#endif

#define CUDA_CHECK(expr)                                                                     \
  do {                                                                                       \
    cudaError_t err_ = (expr);                                                               \
    if (err_ != cudaSuccess) {                                                               \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(err_)); \
      std::exit(2);                                                                          \
    }                                                                                        \
  } while (0)

namespace {

struct Options {
  int batch = 4, seqlen = 4096, seqlen_k = -1, heads = 16, hdim = 128, reps = 50;
  bool causal = false, check = false, grid = false;
  flash::DType dtype = flash::DType::kBFloat16;
};

template <typename T> __device__ T from_float(float x);
template <> __device__ __half from_float<__half>(float x) { return __float2half(x); }
template <> __device__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16(x); }
template <> __device__ float from_float<float>(float x) { return x; }
template <typename T> __device__ float to_float(T x);
template <> __device__ float to_float<__half>(__half x) { return __half2float(x); }
template <> __device__ float to_float<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }

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

// Reference: one thread per (query, head, batch); fp32 scores, two passes (max, then sum and
// weighted V). Dense contiguous layouts (batch, seqlen, heads, d). Bottom-right causal.
template <typename T>
__global__ void reference_fwd(const T* q, const T* k, const T* v, float* out, float* lse, int batch, int sq,
                              int sk, int heads, int d, float scale, bool causal) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x, h = blockIdx.y, b = blockIdx.z;
  if (i >= sq) return;
  const T* qi = q + ((size_t(b) * sq + i) * heads + h) * d;
  const int j_end = causal ? std::min(sk, i + sk - sq + 1) : sk;
  float m = -INFINITY;
  for (int j = 0; j < j_end; ++j) {
    const T* kj = k + ((size_t(b) * sk + j) * heads + h) * d;
    float s = 0.f;
    for (int c = 0; c < d; ++c) s += to_float(qi[c]) * to_float(kj[c]);
    m = fmaxf(m, s * scale);
  }
  float* oi = out + ((size_t(b) * sq + i) * heads + h) * d;
  for (int c = 0; c < d; ++c) oi[c] = 0.f;
  float l = 0.f;
  for (int j = 0; j < j_end; ++j) {
    const T* kj = k + ((size_t(b) * sk + j) * heads + h) * d;
    const T* vj = v + ((size_t(b) * sk + j) * heads + h) * d;
    float s = 0.f;
    for (int c = 0; c < d; ++c) s += to_float(qi[c]) * to_float(kj[c]);
    const float p = expf(s * scale - m);
    l += p;
    for (int c = 0; c < d; ++c) oi[c] += p * to_float(vj[c]);
  }
  for (int c = 0; c < d; ++c) oi[c] = l > 0.f ? oi[c] / l : 0.f;
  lse[(size_t(b) * heads + h) * sq + i] = l > 0.f ? m + logf(l) : -INFINITY;
}

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

// LSE: -inf must match -inf exactly (rows with no visible key); NaN counts as infinitely wrong.
__global__ void max_lse_diff(const float* lse, const float* ref, size_t n, float* result) {
  float worst = 0.f;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float a = lse[i], b = ref[i];
    float diff;
    if (isinf(a) || isinf(b)) diff = (a == b) ? 0.f : INFINITY;
    else diff = (a != a || b != b) ? INFINITY : fabsf(a - b);
    worst = fmaxf(worst, diff);
  }
  atomicMax(reinterpret_cast<int*>(result), __float_as_int(worst));
}

cudaError_t run(const flash::FwdParams& p, cudaStream_t stream) {
#ifdef BENCH_HDIM
  if (p.dtype == flash::DType::kBFloat16) {
    return flash::launch_fwd<flash::FwdTraits<BENCH_HDIM, BENCH_BM, BENCH_BN, BENCH_WARPS, cutlass::bfloat16_t, BENCH_SPLIT>>(p, stream);
  }
  return flash::launch_fwd<flash::FwdTraits<BENCH_HDIM, BENCH_BM, BENCH_BN, BENCH_WARPS, cutlass::half_t, BENCH_SPLIT>>(p, stream);
#else
  return flash::run_fwd(p, stream);
#endif
}

struct Result { double ms, tflops; float max_err, max_lse_err; };

template <typename T>
Result bench_one(const Options& o) {
  const int sk = o.seqlen_k > 0 ? o.seqlen_k : o.seqlen;
  const size_t nq = size_t(o.batch) * o.seqlen * o.heads * o.hdim, nk = size_t(o.batch) * sk * o.heads * o.hdim;
  T *q, *k, *v, *out;
  float* lse;
  CUDA_CHECK(cudaMalloc(&q, nq * sizeof(T)));
  CUDA_CHECK(cudaMalloc(&k, nk * sizeof(T)));
  CUDA_CHECK(cudaMalloc(&v, nk * sizeof(T)));
  CUDA_CHECK(cudaMalloc(&out, nq * sizeof(T)));
  CUDA_CHECK(cudaMalloc(&lse, size_t(o.batch) * o.heads * o.seqlen * sizeof(float)));
  fill_random<<<1024, 256>>>(q, nq, 1);
  fill_random<<<1024, 256>>>(k, nk, 2);
  fill_random<<<1024, 256>>>(v, nk, 3);
  CUDA_CHECK(cudaGetLastError());

  flash::FwdParams p;
  p.q_ptr = q, p.k_ptr = k, p.v_ptr = v, p.o_ptr = out, p.lse_ptr = lse;
  const int64_t row = int64_t(o.heads) * o.hdim;
  p.q_batch_stride = row * o.seqlen, p.q_row_stride = row, p.q_head_stride = o.hdim;
  p.k_batch_stride = row * sk, p.k_row_stride = row, p.k_head_stride = o.hdim;
  p.v_batch_stride = row * sk, p.v_row_stride = row, p.v_head_stride = o.hdim;
  p.o_batch_stride = row * o.seqlen, p.o_row_stride = row, p.o_head_stride = o.hdim;
  p.batch = o.batch, p.seqlen_q = o.seqlen, p.seqlen_k = sk, p.nheads = o.heads, p.nheads_k = o.heads;
  p.headdim = o.hdim;
#ifdef BENCH_HDIM
  p.headdim_rounded = BENCH_HDIM;
#else
  p.headdim_rounded = flash::round_head_dim(o.hdim);
#endif
  p.softmax_scale = 1.f / std::sqrt(float(o.hdim));
  p.scale_log2 = p.softmax_scale * float(M_LOG2E);
  p.window_right = o.causal ? 0 : -1;
  p.dtype = o.dtype;

  Result r{0, 0, 0, 0};
  const size_t nlse = size_t(o.batch) * o.heads * o.seqlen;
  if (o.check) {
    fill_nan<<<1024, 256>>>(out, nq);
    fill_nan<<<1024, 256>>>(lse, nlse);
    CUDA_CHECK(run(p, nullptr));
    float *ref, *ref_lse, *err;
    CUDA_CHECK(cudaMalloc(&ref, nq * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&ref_lse, nlse * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&err, 2 * sizeof(float)));
    CUDA_CHECK(cudaMemset(err, 0, 2 * sizeof(float)));
    reference_fwd<T><<<dim3((o.seqlen + 127) / 128, o.heads, o.batch), 128>>>(
        q, k, v, ref, ref_lse, o.batch, o.seqlen, sk, o.heads, o.hdim, p.softmax_scale, o.causal);
    max_abs_diff<T><<<1024, 256>>>(out, ref, nq, err);
    max_lse_diff<<<1024, 256>>>(lse, ref_lse, nlse, err + 1);
    CUDA_CHECK(cudaGetLastError());
    float errs[2];
    CUDA_CHECK(cudaMemcpy(errs, err, 2 * sizeof(float), cudaMemcpyDeviceToHost));
    r.max_err = errs[0], r.max_lse_err = errs[1];
    CUDA_CHECK(cudaFree(ref));
    CUDA_CHECK(cudaFree(ref_lse));
    CUDA_CHECK(cudaFree(err));
  }

  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < 5; ++i) CUDA_CHECK(run(p, nullptr));  // warm-up
  std::vector<float> times;
  for (int i = 0; i < o.reps; ++i) {
    CUDA_CHECK(cudaEventRecord(start));
    CUDA_CHECK(run(p, nullptr));
    CUDA_CHECK(cudaEventRecord(stop));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms);
  }
  std::sort(times.begin(), times.end());
  r.ms = times[times.size() / 2];
  double flops = 4.0 * o.batch * double(o.seqlen) * sk * o.heads * o.hdim;
  if (o.causal) flops /= 2;  // exact only for seqlen_q == seqlen_k, the benchmark's case
  r.tflops = flops / (r.ms * 1e-3) / 1e12;
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  for (void* ptr : {(void*)q, (void*)k, (void*)v, (void*)out, (void*)lse}) CUDA_CHECK(cudaFree(ptr));
  return r;
}

Result bench(const Options& o) {
  return o.dtype == flash::DType::kBFloat16 ? bench_one<__nv_bfloat16>(o) : bench_one<__half>(o);
}

int parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) { std::fprintf(stderr, "missing value after %s\n", a.c_str()); std::exit(2); }
      return argv[++i];
    };
    if (a == "--batch") o.batch = std::atoi(next());
    else if (a == "--seqlen") o.seqlen = std::atoi(next());
    else if (a == "--seqlen-k") o.seqlen_k = std::atoi(next());
    else if (a == "--heads") o.heads = std::atoi(next());
    else if (a == "--hdim") o.hdim = std::atoi(next());
    else if (a == "--causal") o.causal = std::atoi(next()) != 0;
    else if (a == "--reps") o.reps = std::atoi(next());
    else if (a == "--dtype") {
      std::string t = next();
      if (t == "bf16") o.dtype = flash::DType::kBFloat16;
      else if (t == "fp16") o.dtype = flash::DType::kFloat16;
      else { std::fprintf(stderr, "--dtype: bf16 or fp16, got %s\n", t.c_str()); return 2; }
    } else if (a == "--check") o.check = true;
    else if (a == "--grid") o.grid = true;
    else { std::fprintf(stderr, "unknown argument %s (see the header of bench_fwd.cu)\n", a.c_str()); return 2; }
  }
  if (o.batch < 1 || o.seqlen < 1 || o.heads < 1 || o.hdim < 8 || o.hdim % 8 || o.hdim > 256 || o.reps < 1) {
    std::fprintf(stderr, "bad sizes: batch, seqlen, heads >= 1; hdim a multiple of 8 in [8, 256]\n");
    return 2;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (int rc = parse(argc, argv, o)) return rc;
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "bench_fwd: no CUDA GPU found\n");
    return 2;
  }
#ifdef BENCH_HDIM
  if (o.hdim > BENCH_HDIM) { std::fprintf(stderr, "this tuning build runs hdim <= %d\n", BENCH_HDIM); return 2; }
#endif
  std::vector<Options> runs;
  if (o.grid) {
    for (int causal = 0; causal < 2; ++causal) {
      for (int s = 512; s <= 16384; s *= 2) {
        Options g = o;
        g.seqlen = s, g.seqlen_k = -1, g.batch = 16384 / s, g.heads = 2048 / o.hdim, g.causal = causal;
        runs.push_back(g);
      }
    }
  } else {
    runs.push_back(o);
  }
  int failures = 0;
  std::printf("%-6s %-5s %-7s %-7s %-6s %-5s %-6s %10s %10s%s\n", "dtype", "hdim", "seqlen", "seqlen_k", "batch",
              "heads", "causal", "ms", "TFLOP/s", o.check ? "    max_err    lse_err" : "");
  for (const Options& r : runs) {
    Result res = bench(r);
    std::printf("%-6s %-5d %-7d %-7d %-6d %-5d %-6d %10.4f %10.1f", r.dtype == flash::DType::kBFloat16 ? "bf16" : "fp16",
                r.hdim, r.seqlen, r.seqlen_k > 0 ? r.seqlen_k : r.seqlen, r.batch, r.heads, int(r.causal), res.ms,
                res.tflops);
    if (r.check) {
      // bf16 keeps 8 mantissa bits: outputs in [-1, 1] round to within 2^-8; allow 2 roundings.
      const float tol = r.dtype == flash::DType::kBFloat16 ? 1.6e-2f : 2e-3f;
      const bool ok = res.max_err <= tol && res.max_lse_err <= 1e-3f;  // LSE: fp32 sums in another order
      failures += !ok;
      std::printf(" %10.2e %10.2e %s", res.max_err, res.max_lse_err, ok ? "ok" : "MISMATCH");
    }
    std::printf("\n");
  }
  return failures ? 1 : 0;
}
