// bench_fwd: the forward kernel timed with no Python in the loop. Links only the torch-free
// kernel core (csrc/) and the CUDA runtime.
//
//   bench_fwd [--batch B] [--seqlen S] [--seqlen-k SK] [--heads H] [--hdim D] [--causal 0|1]
//             [--dtype bf16|fp16] [--family sm80|sm90|auto] [--reps N] [--check] [--grid] [--compiled]
//             [--help]
//
// --family picks the kernel family as FLASH_ATTN_CUDA_FAMILY does for the extension (params.h,
// FwdFamily): sm90 runs where the build compiled it (90a), the GPU is compute capability 9.0 and it
// implements the call; elsewhere sm80 runs. The "family" column says which one ran.
//
// --grid runs the FA2-paper grid for --hdim (batch*seqlen = 16k, hidden 2048, seqlen 512..16k,
// causal and not). --check compares against a simple fp32 reference kernel on the same inputs
// and exits 1 on mismatch. Inputs are uniform random in [-1, 1) (never zeros), outputs are
// poisoned with NaN before every checked run. --compiled lists the head dims and dtypes this
// build runs. Exit codes (bench_common.h): 0 ok, 1 mismatch, 2 bad arguments / no GPU / CUDA
// error, 3 head dim or dtype not compiled (or too little shared memory on this GPU).
//
// Tile-size tuning: compile with -DBENCH_HDIM=D -DBENCH_BM=BM -DBENCH_BN=BN -DBENCH_WARPS=W
// -DBENCH_SPLIT=0|1 to time FwdTraits<D, BM, BN, W, *, SPLIT> instead of the table in
// csrc/fwd_tile_config.h
// (benchmarks/cpp/tune_fwd.sh does this for a list of configs).
#include <cmath>
#include <cstdio>
#include <vector>

#include "bench_common.h"
#include "flash_api.h"
#ifdef BENCH_HDIM
#include "fwd_launch.h"
#endif

namespace {

using bench::Options;
using bench::to_float;

constexpr char kUsage[] =
    "bench_fwd: the forward kernel timed with CUDA events (median), TFLOP/s = 4*B*Sq*Sk*H*D (/2 causal)\n"
    "  bench_fwd [--batch B] [--seqlen S] [--seqlen-k SK] [--heads H] [--hdim D] [--causal 0|1]\n"
    "            [--dtype bf16|fp16] [--family sm80|sm90|auto] [--reps N] [--check] [--grid] [--compiled] [--help]\n"
    "  defaults: --batch 4 --seqlen 4096 --seqlen-k (= seqlen) --heads 16 --hdim 128 --causal 0 --dtype bf16\n"
    "            --family auto --reps 50\n"
    "  --family    sm90: the Hopper kernels where they can serve the call (built with 90a, a compute capability\n"
    "              9.0 GPU, options they implement), else sm80; sm80: the sm80 kernels; the family column says\n"
    "              which ran\n"
    "  --check     compare out and lse with an fp32 reference kernel on the same inputs; exit 1 on mismatch\n"
    "  --grid      the FA2-paper grid for --hdim (batch*seqlen = 16k, hidden 2048, seqlen 512..16k, causal 0/1)\n"
    "  --compiled  print the head dims and dtypes this build runs, and exit\n"
    "  exit codes: 0 ok, 1 mismatch, 2 bad arguments / no GPU / CUDA error,\n"
    "              3 not compiled into this build (or too little shared memory on this GPU)\n";

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

cudaError_t run(const flash::FwdParams& p, cudaStream_t stream, flash::FwdFamily* ran = nullptr) {
#ifdef BENCH_HDIM
  if (ran != nullptr) *ran = flash::FwdFamily::kSm80;
  if (p.dtype == flash::DType::kBFloat16) {
    return flash::launch_fwd<flash::FwdTraits<BENCH_HDIM, BENCH_BM, BENCH_BN, BENCH_WARPS, cutlass::bfloat16_t, BENCH_SPLIT>>(p, stream);
  }
  return flash::launch_fwd<flash::FwdTraits<BENCH_HDIM, BENCH_BM, BENCH_BN, BENCH_WARPS, cutlass::half_t, BENCH_SPLIT>>(p, stream);
#else
  return flash::run_fwd(p, stream, ran);
#endif
}

struct Result { double ms, tflops; float max_err, max_lse_err; flash::FwdFamily family; };

template <typename T>
Result bench_one(const Options& o) {
  const int sk = o.sk();
  const size_t nq = size_t(o.batch) * o.seqlen * o.heads * o.hdim, nk = size_t(o.batch) * sk * o.heads * o.hdim;
  T *q, *k, *v, *out;
  float* lse;
  CUDA_CHECK(cudaMalloc(&q, nq * sizeof(T)));
  CUDA_CHECK(cudaMalloc(&k, nk * sizeof(T)));
  CUDA_CHECK(cudaMalloc(&v, nk * sizeof(T)));
  CUDA_CHECK(cudaMalloc(&out, nq * sizeof(T)));
  CUDA_CHECK(cudaMalloc(&lse, size_t(o.batch) * o.heads * o.seqlen * sizeof(float)));
  bench::fill_random<<<1024, 256>>>(q, nq, 1);
  bench::fill_random<<<1024, 256>>>(k, nk, 2);
  bench::fill_random<<<1024, 256>>>(v, nk, 3);
  CUDA_CHECK(cudaGetLastError());

#ifdef BENCH_HDIM
  const int headdim_rounded = BENCH_HDIM;
#else
  const int headdim_rounded = flash::round_head_dim(o.hdim);
#endif
  const flash::FwdParams p = bench::dense_fwd_params(o, q, k, v, out, lse, headdim_rounded);

  Result r{0, 0, 0, 0, flash::FwdFamily::kSm80};
  const size_t nlse = size_t(o.batch) * o.heads * o.seqlen;
  if (o.check) {
    bench::fill_nan<<<1024, 256>>>(out, nq);
    bench::fill_nan<<<1024, 256>>>(lse, nlse);
    CUDA_CHECK(run(p, nullptr, &r.family));
    float *ref, *ref_lse, *err;
    CUDA_CHECK(cudaMalloc(&ref, nq * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&ref_lse, nlse * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&err, 2 * sizeof(float)));
    CUDA_CHECK(cudaMemset(err, 0, 2 * sizeof(float)));
    reference_fwd<T><<<dim3((o.seqlen + 127) / 128, o.heads, o.batch), 128>>>(
        q, k, v, ref, ref_lse, o.batch, o.seqlen, sk, o.heads, o.hdim, p.softmax_scale, o.causal);
    bench::max_abs_diff<T><<<1024, 256>>>(out, ref, nq, err);
    max_lse_diff<<<1024, 256>>>(lse, ref_lse, nlse, err + 1);
    CUDA_CHECK(cudaGetLastError());
    float errs[2];
    CUDA_CHECK(cudaMemcpy(errs, err, 2 * sizeof(float), cudaMemcpyDeviceToHost));
    r.max_err = errs[0], r.max_lse_err = errs[1];
    CUDA_CHECK(cudaFree(ref));
    CUDA_CHECK(cudaFree(ref_lse));
    CUDA_CHECK(cudaFree(err));
  }

  r.ms = bench::median_ms([&] { return run(p, nullptr, &r.family); }, o.reps);
  double flops = 4.0 * o.batch * double(o.seqlen) * sk * o.heads * o.hdim;
  if (o.causal) flops /= 2;  // exact only for seqlen_q == seqlen_k, the benchmark's case
  r.tflops = flops / (r.ms * 1e-3) / 1e12;
  for (void* ptr : {(void*)q, (void*)k, (void*)v, (void*)out, (void*)lse}) CUDA_CHECK(cudaFree(ptr));
  return r;
}

Result bench_any(const Options& o) {
  return o.dtype == flash::DType::kBFloat16 ? bench_one<__nv_bfloat16>(o) : bench_one<__half>(o);
}

// What this binary runs: the build's instantiations, or the one tuning config.
std::vector<int> compiled_head_dims() {
#ifdef BENCH_HDIM
  return {BENCH_HDIM};
#else
  return flash::compiled_head_dims();
#endif
}

std::vector<flash::DType> compiled_dtypes() {
#ifdef BENCH_HDIM
  return {flash::DType::kFloat16, flash::DType::kBFloat16};
#else
  return flash::compiled_dtypes();
#endif
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (int rc = bench::parse(argc, argv, o, "bench_fwd", /*with_deterministic=*/false, /*with_family=*/true)) return rc;
  if (o.help) { std::printf("%s", kUsage); return 0; }
  if (o.list_compiled) { bench::print_compiled(compiled_head_dims(), compiled_dtypes()); return 0; }
  if (int rc = bench::check_compiled(o, "bench_fwd", compiled_head_dims(), compiled_dtypes())) return rc;
  bench::require_gpu("bench_fwd");
#ifndef BENCH_HDIM
  int device = 0, smem_optin = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  const int smem = flash::fwd_shared_memory_bytes(flash::round_head_dim(o.hdim));
  const flash::FwdParams probe = bench::dense_fwd_params(o, nullptr, nullptr, nullptr, nullptr, nullptr,
                                                         flash::round_head_dim(o.hdim));
  if (smem > smem_optin && flash::fwd_family(probe) == flash::FwdFamily::kSm80) {  // sm90: 9.0's 227 KB
    std::fprintf(stderr,
                 "bench_fwd: the head-dim-%d kernel needs %d KB of shared memory per block; this GPU allows %d KB\n",
                 flash::round_head_dim(o.hdim), smem / 1024, smem_optin / 1024);
    return bench::kExitUnsupported;
  }
#endif
  const std::vector<Options> runs = bench::runs_for(o);
  int failures = 0;
  std::printf("%-6s %-5s %-7s %-7s %-6s %-5s %-6s %-6s %10s %10s%s\n", "dtype", "hdim", "seqlen", "seqlen_k", "batch",
              "heads", "causal", "family", "ms", "TFLOP/s", o.check ? "    max_err    lse_err" : "");
  for (const Options& r : runs) {
    Result res = bench_any(r);
    std::printf("%-6s %-5d %-7d %-7d %-6d %-5d %-6d %-6s %10.4f %10.1f", bench::dtype_name(r.dtype), r.hdim, r.seqlen,
                r.sk(), r.batch, r.heads, int(r.causal), flash::family_name(res.family), res.ms, res.tflops);
    if (r.family == flash::FwdFamily::kSm90 && res.family != flash::FwdFamily::kSm90) {
      std::fprintf(stderr, "bench_fwd: --family sm90 cannot serve this call (sm90 not compiled for this head dim "
                           "and dtype, not a compute capability 9.0 GPU, or options it does not implement): ran sm80\n");
    }
    if (r.check) {
      // bf16 keeps 8 mantissa bits: outputs in [-1, 1] round to within 2^-8; allow 2 roundings.
      const float tol = r.dtype == flash::DType::kBFloat16 ? 1.6e-2f : 2e-3f;
      const bool ok = res.max_err <= tol && res.max_lse_err <= 1e-3f;  // LSE: fp32 sums in another order
      failures += !ok;
      std::printf(" %10.2e %10.2e %s", res.max_err, res.max_lse_err, ok ? "ok" : "MISMATCH");
    }
    std::printf("\n");
  }
  return failures ? bench::kExitMismatch : bench::kExitOk;
}
