// bench_bwd: the backward kernels timed with no Python in the loop. Links only the torch-free
// kernel core (csrc/, forward and backward) and the CUDA runtime; `make bench-cpp` skips it in
// builds without the backward (FLASH_ATTN_CUDA_BACKWARD=0).
//
//   bench_bwd [--batch B] [--seqlen S] [--seqlen-k SK] [--heads H] [--hdim D] [--causal 0|1]
//             [--dtype bf16|fp16] [--reps N] [--deterministic] [--check] [--grid] [--compiled] [--help]
//
// Same command line as bench_fwd (bench_common.h), nheads_k == nheads. flash::run_fwd runs once
// for out and lse; then every timed call is what the torch binding does per backward:
// flash::run_bwd (dq_accum zeroed, D pre-pass, main kernel, dQ conversion), median of --reps
// after 5 warm-ups. TFLOP/s = 2.5 * 4*B*Sq*Sk*H*D (/2 causal): the backward's five GEMMs
// (S = QK^T again, dP = dO V^T, dV = P^T dO, dK = dS^T Q, dQ = dS K) against the forward's two.
//
// --check compares dq, dk, dv with simple fp32 reference kernels (below) on the same inputs and
// exits 1 on mismatch; dq/dk/dv (and delta) are poisoned with NaN bytes first, so an unwritten
// element fails. --deterministic sets params.deterministic and num_dq_splits =
// flash::bwd_dq_accum_splits(); with --check it also runs the backward 3 times and requires
// bit-identical dq, dk, dv. Exit codes: 0 ok, 1 mismatch, 2 bad arguments / no GPU / CUDA error,
// 3 head dim or dtype not compiled (or too little shared memory on this GPU).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "bench_common.h"
#include "flash_api.h"

namespace {

using bench::Options;
using bench::to_float;

constexpr char kUsage[] =
    "bench_bwd: the backward kernels timed with CUDA events (median of run_bwd),\n"
    "           TFLOP/s = 2.5 * 4*B*Sq*Sk*H*D (/2 causal)\n"
    "  bench_bwd [--batch B] [--seqlen S] [--seqlen-k SK] [--heads H] [--hdim D] [--causal 0|1]\n"
    "            [--dtype bf16|fp16] [--reps N] [--deterministic] [--check] [--grid] [--compiled] [--help]\n"
    "  defaults: --batch 4 --seqlen 4096 --seqlen-k (= seqlen) --heads 16 --hdim 128 --causal 0 --dtype bf16\n"
    "            --reps 50\n"
    "  --deterministic  params.deterministic with num_dq_splits = flash::bwd_dq_accum_splits(params, SMs)\n"
    "  --check     compare dq, dk, dv with fp32 reference kernels on the same inputs; exit 1 on mismatch;\n"
    "              with --deterministic also require 3 runs to be bit-identical\n"
    "  --grid      the FA2-paper grid for --hdim (batch*seqlen = 16k, hidden 2048, seqlen 512..16k, causal 0/1)\n"
    "  --compiled  print the head dims and dtypes this build runs, and exit\n"
    "  exit codes: 0 ok, 1 mismatch, 2 bad arguments / no GPU / CUDA error,\n"
    "              3 not compiled into this build (or too little shared memory on this GPU)\n";

// Tolerance of --check, per gradient: max|ours - ref| <= rel * max|ref| + abs. The kernel rounds
// P and dS to the input type before its MMAs, and its outputs: relative errors of at most 2^-8
// (bf16) / 2^-11 (fp16) per term, random in sign, which keep the worst error a few times that
// below max|ref| (H200, bf16, d 64/128: 3.4e-3 * max|ref| at most). rel is ~5x (bf16) / ~10x
// (fp16) that; a wrong mask, a lost K/V block or a wrong scale moves the error to the size of
// the gradient itself. abs only guards a gradient that is ~0 everywhere.
struct Tolerance { float rel, abs; };
Tolerance tolerance(flash::DType t) {
  return t == flash::DType::kBFloat16 ? Tolerance{2e-2f, 1e-5f} : Tolerance{5e-3f, 1e-5f};
}

// ---------------------------------------------------------------- REFERENCE (fp32)
// One (batch, head) slice at a time, dense layouts (batch, seqlen, heads, d): a slice is seqlen
// rows of d elements, `row_stride` apart. S, P, dP and dS of the slice are fp32 (seqlen_q,
// seqlen_k) buffers. Grid-stride loops; speed is irrelevant.
//   P = softmax(scale * Q K^T) (masked keys 0; a row with no visible key all 0)
//   dV = P^T dO,  dP = dO V^T,  D = rowsum(P * dP) (= rowsum(dO * O)),  dS = P * (dP - D)
//   dQ = scale * dS K,  dK = scale * dS^T Q

#define GRID_STRIDE(idx, n) \
  for (size_t idx = blockIdx.x * size_t(blockDim.x) + threadIdx.x; idx < (n); idx += size_t(gridDim.x) * blockDim.x)

// out[i, j] = a_i . b_j for i < na, j < nb (a, b: rows of d elements, row_stride apart).
template <typename T>
__global__ void ref_row_dots(const T* a, const T* b, float* out, int na, int nb, int64_t row_stride, int d) {
  GRID_STRIDE(idx, size_t(na) * nb) {
    const T* ai = a + int64_t(idx / nb) * row_stride;
    const T* bj = b + int64_t(idx % nb) * row_stride;
    float acc = 0.f;
    for (int c = 0; c < d; ++c) acc += to_float(ai[c]) * to_float(bj[c]);
    out[idx] = acc;
  }
}

// Sum (kMax = false) or max over the thread block; every thread gets the result.
template <bool kMax>
__device__ float block_reduce(float v) {
  __shared__ float partial[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = (blockDim.x + 31) / 32;
  const float identity = kMax ? -INFINITY : 0.f;
  for (int offset = 16; offset > 0; offset /= 2) {
    const float other = __shfl_xor_sync(0xffffffff, v, offset);
    v = kMax ? fmaxf(v, other) : v + other;
  }
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < nwarps ? partial[lane] : identity;
  for (int offset = 16; offset > 0; offset /= 2) {
    const float other = __shfl_xor_sync(0xffffffff, v, offset);
    v = kMax ? fmaxf(v, other) : v + other;
  }
  __syncthreads();  // partial is reused by the next call
  return v;
}

// In place, one block per row: s[i, j] (raw Q K^T) -> P[i, j] = softmax_j(scale * s[i, j]) over the
// keys row i sees (j <= i + sk - sq when causal, bottom-right aligned as params.h), 0 elsewhere.
__global__ void ref_softmax_rows(float* s, int sq, int sk, float scale, bool causal) {
  for (int i = blockIdx.x; i < sq; i += gridDim.x) {
    float* si = s + size_t(i) * sk;
    const int j_end = causal ? max(0, min(sk, i + sk - sq + 1)) : sk;
    float m = -INFINITY;
    for (int j = threadIdx.x; j < j_end; j += blockDim.x) m = fmaxf(m, si[j] * scale);
    m = block_reduce<true>(m);
    float l = 0.f;
    for (int j = threadIdx.x; j < j_end; j += blockDim.x) l += expf(si[j] * scale - m);
    l = block_reduce<false>(l);
    for (int j = threadIdx.x; j < sk; j += blockDim.x) si[j] = j < j_end ? expf(si[j] * scale - m) / l : 0.f;
  }
}

// In place, one block per row: dp[i, j] -> dS[i, j] = P[i, j] * (dP[i, j] - D_i), D_i = sum_j P dP.
__global__ void ref_ds_rows(const float* p, float* dp, int sq, int sk) {
  for (int i = blockIdx.x; i < sq; i += gridDim.x) {
    const float* pi = p + size_t(i) * sk;
    float* dpi = dp + size_t(i) * sk;
    float dsum = 0.f;
    for (int j = threadIdx.x; j < sk; j += blockDim.x) dsum += pi[j] * dpi[j];
    dsum = block_reduce<false>(dsum);
    for (int j = threadIdx.x; j < sk; j += blockDim.x) dpi[j] = pi[j] * (dpi[j] - dsum);
  }
}

// out[r, c] = alpha * sum_{t < nt} A(r, t) * b[t, c] for r < nr, c < d. A(r, t) = a[r*a_rs + t*a_ts]
// (P or dS, either way round); b and out: rows of d elements, row_stride apart.
template <typename T>
__global__ void ref_gemm(const float* a, int64_t a_rs, int64_t a_ts, const T* b, float* out, int nr, int nt,
                         int64_t row_stride, int d, float alpha) {
  GRID_STRIDE(idx, size_t(nr) * d) {
    const int r = int(idx / d), c = int(idx % d);
    float acc = 0.f;
    for (int t = 0; t < nt; ++t) acc += a[r * a_rs + t * a_ts] * to_float(b[t * row_stride + c]);
    out[r * row_stride + c] = alpha * acc;
  }
}

// result[0] = max(result[0], max_i |a[i]|).
__global__ void max_abs(const float* a, size_t n, float* result) {
  float worst = 0.f;
  GRID_STRIDE(i, n) { worst = fmaxf(worst, a[i] != a[i] ? INFINITY : fabsf(a[i])); }
  atomicMax(reinterpret_cast<int*>(result), __float_as_int(worst));  // non-negative floats order as ints
}

int blocks_for(size_t n) { return int(std::min<size_t>((n + 255) / 256, 1 << 16)); }

// ref_dq: (batch, sq, heads, d), ref_dk / ref_dv: (batch, sk, heads, d), fp32.
template <typename T>
void reference_bwd(const Options& o, float scale, const T* q, const T* k, const T* v, const T* dout, float* ref_dq,
                   float* ref_dk, float* ref_dv) {
  const int sq = o.seqlen, sk = o.sk(), d = o.hdim;
  const int64_t row = int64_t(o.heads) * d;
  float *p, *ds;
  CUDA_CHECK(cudaMalloc(&p, size_t(sq) * sk * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&ds, size_t(sq) * sk * sizeof(float)));
  const int s_blocks = blocks_for(size_t(sq) * sk), row_blocks = std::min(sq, 1 << 16);
  for (int b = 0; b < o.batch; ++b) {
    for (int h = 0; h < o.heads; ++h) {
      const int64_t q_off = int64_t(b) * sq * row + int64_t(h) * d, k_off = int64_t(b) * sk * row + int64_t(h) * d;
      ref_row_dots<T><<<s_blocks, 256>>>(q + q_off, k + k_off, p, sq, sk, row, d);         // S
      ref_softmax_rows<<<row_blocks, 256>>>(p, sq, sk, scale, o.causal);                   // P
      ref_row_dots<T><<<s_blocks, 256>>>(dout + q_off, v + k_off, ds, sq, sk, row, d);     // dP
      ref_ds_rows<<<row_blocks, 256>>>(p, ds, sq, sk);                                     // dS
      ref_gemm<T><<<blocks_for(size_t(sk) * d), 256>>>(p, 1, sk, dout + q_off, ref_dv + k_off, sk, sq, row, d, 1.f);
      ref_gemm<T><<<blocks_for(size_t(sk) * d), 256>>>(ds, 1, sk, q + q_off, ref_dk + k_off, sk, sq, row, d, scale);
      ref_gemm<T><<<blocks_for(size_t(sq) * d), 256>>>(ds, sk, 1, k + k_off, ref_dq + q_off, sq, sk, row, d, scale);
      CUDA_CHECK(cudaGetLastError());
    }
  }
  CUDA_CHECK(cudaFree(p));
  CUDA_CHECK(cudaFree(ds));
}

// ---------------------------------------------------------------- BENCHMARK

struct Result {
  double ms = 0, tflops = 0;
  int dq_splits = 1;
  float err[3] = {0, 0, 0}, ref_max[3] = {0, 0, 0};  // dq, dk, dv
  bool identical = true;                              // --check --deterministic: 3 runs bit-identical
};

template <typename T>
Result bench_one(const Options& o, int num_sms) {
  const int sq = o.seqlen, sk = o.sk();
  const size_t nq = size_t(o.batch) * sq * o.heads * o.hdim, nk = size_t(o.batch) * sk * o.heads * o.hdim;
  const size_t nrows = size_t(o.batch) * o.heads * sq;  // lse
  const int sq_rounded = flash::bwd_rows_rounded(sq);
  const size_t nrows_padded = size_t(o.batch) * o.heads * sq_rounded;  // delta, lse_log2, dq_accum rows
  const int headdim_rounded = flash::round_head_dim(o.hdim);
  T *q, *k, *v, *out, *dout, *dq, *dk, *dv;
  float *lse, *delta, *lse_log2, *dq_accum;
  for (T** ptr : {&q, &out, &dout, &dq}) CUDA_CHECK(cudaMalloc(ptr, nq * sizeof(T)));
  for (T** ptr : {&k, &v, &dk, &dv}) CUDA_CHECK(cudaMalloc(ptr, nk * sizeof(T)));  // dk, dv per query head
  CUDA_CHECK(cudaMalloc(&lse, nrows * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&delta, nrows_padded * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&lse_log2, nrows_padded * sizeof(float)));
  bench::fill_random<<<1024, 256>>>(q, nq, 1);
  bench::fill_random<<<1024, 256>>>(k, nk, 2);
  bench::fill_random<<<1024, 256>>>(v, nk, 3);
  bench::fill_random<<<1024, 256>>>(dout, nq, 4);
  CUDA_CHECK(cudaGetLastError());

  flash::BwdParams p;
  static_cast<flash::FwdParams&>(p) = bench::dense_fwd_params(o, q, k, v, out, lse, headdim_rounded);
  CUDA_CHECK(flash::run_fwd(p, nullptr));  // out, lse

  const int64_t row = int64_t(o.heads) * o.hdim;
  p.do_ptr = dout, p.dq_ptr = dq, p.dk_ptr = dk, p.dv_ptr = dv, p.delta_ptr = delta, p.lse_log2_ptr = lse_log2;
  p.seqlen_q_rounded = sq_rounded;
  p.do_batch_stride = row * sq, p.do_row_stride = row, p.do_head_stride = o.hdim;
  p.dq_batch_stride = row * sq, p.dq_row_stride = row, p.dq_head_stride = o.hdim;
  p.dk_batch_stride = row * sk, p.dk_row_stride = row, p.dk_head_stride = o.hdim;
  p.dv_batch_stride = row * sk, p.dv_row_stride = row, p.dv_head_stride = o.hdim;
  p.deterministic = o.deterministic;
  // Deterministic on the sm90 backward: its dQ semaphores (the pre-pass zeroes them; poisoned here).
  int* dq_semaphores = nullptr;
  if (const int64_t semaphores = flash::bwd_dq_semaphores(p); semaphores > 0) {
    CUDA_CHECK(cudaMalloc(&dq_semaphores, semaphores * sizeof(int)));
    CUDA_CHECK(cudaMemset(dq_semaphores, 0xFF, semaphores * sizeof(int)));
    p.dq_semaphore_ptr = dq_semaphores;
  }
  p.num_dq_splits = flash::bwd_dq_accum_splits(p, num_sms);
  if (p.num_dq_splits < 1) {
    std::fprintf(stderr, "bench_bwd: flash::bwd_dq_accum_splits returned %d\n", p.num_dq_splits);
    std::exit(bench::kExitError);
  }
  const size_t accum_bytes = size_t(p.num_dq_splits) * nrows_padded * headdim_rounded * sizeof(float);
  CUDA_CHECK(cudaMalloc(&dq_accum, accum_bytes));
  p.dq_accum_ptr = dq_accum;
  // One backward as the torch binding runs it (the launch zeroes dq_accum itself: poisoned here once).
  CUDA_CHECK(cudaMemset(dq_accum, 0xFF, accum_bytes));
  auto run_bwd = [&]() -> cudaError_t { return flash::run_bwd(p, nullptr); };
  // A checked backward: every output poisoned with NaN bytes first.
  auto run_poisoned = [&]() {
    CUDA_CHECK(cudaMemset(dq, 0xFF, nq * sizeof(T)));
    CUDA_CHECK(cudaMemset(dk, 0xFF, nk * sizeof(T)));
    CUDA_CHECK(cudaMemset(dv, 0xFF, nk * sizeof(T)));
    CUDA_CHECK(cudaMemset(delta, 0xFF, nrows_padded * sizeof(float)));
    CUDA_CHECK(cudaMemset(lse_log2, 0xFF, nrows_padded * sizeof(float)));
    CUDA_CHECK(run_bwd());
    CUDA_CHECK(cudaDeviceSynchronize());
  };

  Result r;
  r.dq_splits = p.num_dq_splits;
  if (o.check) {
    run_poisoned();
    float *ref_dq, *ref_dk, *ref_dv, *err;
    CUDA_CHECK(cudaMalloc(&ref_dq, nq * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&ref_dk, nk * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&ref_dv, nk * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&err, 6 * sizeof(float)));
    CUDA_CHECK(cudaMemset(err, 0, 6 * sizeof(float)));
    reference_bwd<T>(o, p.softmax_scale, q, k, v, dout, ref_dq, ref_dk, ref_dv);
    bench::max_abs_diff<T><<<1024, 256>>>(dq, ref_dq, nq, err + 0);
    bench::max_abs_diff<T><<<1024, 256>>>(dk, ref_dk, nk, err + 1);
    bench::max_abs_diff<T><<<1024, 256>>>(dv, ref_dv, nk, err + 2);
    max_abs<<<1024, 256>>>(ref_dq, nq, err + 3);
    max_abs<<<1024, 256>>>(ref_dk, nk, err + 4);
    max_abs<<<1024, 256>>>(ref_dv, nk, err + 5);
    CUDA_CHECK(cudaGetLastError());
    float errs[6];
    CUDA_CHECK(cudaMemcpy(errs, err, 6 * sizeof(float), cudaMemcpyDeviceToHost));
    for (int t = 0; t < 3; ++t) r.err[t] = errs[t], r.ref_max[t] = errs[3 + t];
    for (float* ptr : {ref_dq, ref_dk, ref_dv, err}) CUDA_CHECK(cudaFree(ptr));

    if (o.deterministic) {  // runs 2 and 3 must reproduce run 1 bit for bit
      const size_t bytes[3] = {nq * sizeof(T), nk * sizeof(T), nk * sizeof(T)};
      const T* grads[3] = {dq, dk, dv};
      std::vector<char> first[3], again(std::max(bytes[0], bytes[1]));
      for (int t = 0; t < 3; ++t) {
        first[t].resize(bytes[t]);
        CUDA_CHECK(cudaMemcpy(first[t].data(), grads[t], bytes[t], cudaMemcpyDeviceToHost));
      }
      for (int rep = 0; rep < 2; ++rep) {
        run_poisoned();
        for (int t = 0; t < 3; ++t) {
          CUDA_CHECK(cudaMemcpy(again.data(), grads[t], bytes[t], cudaMemcpyDeviceToHost));
          r.identical = r.identical && std::memcmp(first[t].data(), again.data(), bytes[t]) == 0;
        }
      }
    }
  }

  r.ms = bench::median_ms(run_bwd, o.reps);
  double flops = 2.5 * 4.0 * o.batch * double(sq) * sk * o.heads * o.hdim;
  if (o.causal) flops /= 2;  // exact only for seqlen_q == seqlen_k, the benchmark's case
  r.tflops = flops / (r.ms * 1e-3) / 1e12;
  for (void* ptr : {(void*)q, (void*)k, (void*)v, (void*)out, (void*)dout, (void*)dq, (void*)dk, (void*)dv,
                    (void*)lse, (void*)delta, (void*)lse_log2, (void*)dq_accum}) {
    CUDA_CHECK(cudaFree(ptr));
  }
  return r;
}

Result bench_any(const Options& o, int num_sms) {
  return o.dtype == flash::DType::kBFloat16 ? bench_one<__nv_bfloat16>(o, num_sms) : bench_one<__half>(o, num_sms);
}

// kExitUnsupported with a message when a forward or backward block does not fit this GPU.
int check_shared_memory(const Options& o, int device) {
  int optin = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  const int d = flash::round_head_dim(o.hdim);
  const int need[2] = {flash::fwd_shared_memory_bytes(d), flash::bwd_shared_memory_bytes(d)};
  const char* what[2] = {"forward", "backward"};
  for (int t = 0; t < 2; ++t) {
    if (need[t] > optin) {
      std::fprintf(stderr, "bench_bwd: the head-dim-%d %s kernel needs %d KB of shared memory per block; "
                   "this GPU allows %d KB\n", d, what[t], need[t] / 1024, optin / 1024);
      return bench::kExitUnsupported;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (int rc = bench::parse(argc, argv, o, "bench_bwd", /*with_deterministic=*/true)) return rc;
  if (o.help) { std::printf("%s", kUsage); return 0; }
  if (o.list_compiled) { bench::print_compiled(flash::compiled_head_dims(), flash::compiled_dtypes()); return 0; }
  if (int rc = bench::check_compiled(o, "bench_bwd", flash::compiled_head_dims(), flash::compiled_dtypes())) return rc;
  bench::require_gpu("bench_bwd");
  int device = 0, num_sms = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, device));
  if (int rc = check_shared_memory(o, device)) return rc;

  const std::vector<Options> runs = bench::runs_for(o);
  const Tolerance tol = tolerance(o.dtype);
  std::printf("# timed: flash::run_bwd (dq_accum zeroed, D pre-pass, main kernel, dQ conversion), as the torch "
              "binding runs a backward; TFLOP/s = 2.5 * 4*B*Sq*Sk*H*D (/2 causal)\n");
  if (o.check) {
    std::printf("# check: per gradient, max|ours - fp32 reference| <= %.0e * max|ref| + %.0e (%s)%s\n", tol.rel,
                tol.abs, bench::dtype_name(o.dtype), o.deterministic ? "; 3 runs bit-identical" : "");
  }
  int failures = 0;
  std::printf("%-6s %-5s %-7s %-7s %-6s %-5s %-6s %-4s %-6s %10s %10s%s\n", "dtype", "hdim", "seqlen", "seqlen_k",
              "batch", "heads", "causal", "det", "splits", "ms", "TFLOP/s",
              o.check ? "  dq_err/tol         dk_err/tol         dv_err/tol" : "");
  for (const Options& r : runs) {
    const Result res = bench_any(r, num_sms);
    std::printf("%-6s %-5d %-7d %-7d %-6d %-5d %-6d %-4d %-6d %10.4f %10.1f", bench::dtype_name(r.dtype), r.hdim,
                r.seqlen, r.sk(), r.batch, r.heads, int(r.causal), int(r.deterministic), res.dq_splits, res.ms,
                res.tflops);
    if (r.check) {
      bool ok = true;
      for (int t = 0; t < 3; ++t) {
        const float bound = tol.rel * res.ref_max[t] + tol.abs;
        ok = ok && res.err[t] <= bound;  // false for NaN and inf
        std::printf("  %8.2e/%8.2e", res.err[t], bound);
      }
      if (r.deterministic) std::printf(" %s", res.identical ? "identical" : "NOT-IDENTICAL");
      ok = ok && res.identical;
      failures += !ok;
      std::printf(" %s", ok ? "ok" : "MISMATCH");
    }
    std::printf("\n");
  }
  return failures ? bench::kExitMismatch : bench::kExitOk;
}
