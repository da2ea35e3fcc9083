// sm90_fwd_check: torch-free correctness check and timing of the sm90 (Hopper) forward family
// against an fp32 reference and the sm80 kernel, in one process.
//
// One source, several translation units (so the host compiles them in parallel):
//   -DSM90_CHECK_PART=0  main: inputs, reference, comparison, timing, fwd_supports cases (declares
//                        the launchers weak: a part that did not build is skipped)
//   -DSM90_CHECK_PART=1..12  launchers: sm80 (csrc/fwd_launch.h) and sm90 (csrc/sm90/fwd_launch.h)
//                        per dtype and head dim, and sm90 tuning variants (see the #if chain below)
//   -DSM90_CHECK_PART=13..15 the persistent sm90 forward (csrc/sm90/fwd_persistent.h) of the tile
//                        table's bf16 tiles, d = 128 / 64 / 256: "persistent" (one CTA per SM) and
//                        "persistent x3" (3 CTAs: every check shape runs many tiles per CTA, empty
//                        causal tiles among them); both must equal the one-tile kernel bit for bit
//   -DSM90_CHECK_PART=16 d = 128 "persistent wd x3": the same with FLASH_ATTN_SM90_WATCHDOG
//                        (csrc/sm90/watchdog.h: a stuck mbarrier wait prints where and traps), run
//                        first so that a protocol deadlock reports its place instead of hanging
// Build (all with -gencode arch=compute_90a,code=sm_90a -DCUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED
// -DFLASH_ATTN_CUDA_NO_FEATURES -O3 -std=c++20 --use_fast_math --expt-relaxed-constexpr
// -Icsrc -I$CUTLASS/include): see scripts/sm90_check.sh.
//
// Check: b=2, h=4, h_k=2 (GQA), d in {64, 128, 256}, bf16 and fp16, sq in {1,113,128,1000}, sk in {1,77,128,1000,2048},
// causal 0/1, K/V rows padded (strided) on odd shapes. O and LSE are poisoned (NaN bytes) before
// every run. Pass: max|O - ref| <= 2 * (sm80's) + 1e-3 and likewise for LSE (rows with no key:
// O = 0, LSE = -inf exactly, checked through the reference). Exit 1 on any failure.
// Timing: FA2 grid (batch * seqlen = 16k, hidden 2048: d=128 -> 16 heads, seqlen 1k/4k/16k, causal 0/1),
// median of 20 CUDA-event timings after 3 warm-ups; TFLOP/s = 4 b s^2 h d / t (/2 causal).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <initializer_list>
#include <string_view>
#include <type_traits>
#include <iterator>

#include "params.h"
#include "sm90_tile_counter.h"

#ifndef SM90_CHECK_PART
#define SM90_CHECK_PART 0
#endif

using LaunchFn = cudaError_t (*)(const flash::FwdParams&, cudaStream_t);

// Each part defines launchers named check_<family>_<dtype>_<d>[_<variant>].
#define SM80_LAUNCHER(T, TN, D) \
  cudaError_t check_sm80_##TN##_##D(const flash::FwdParams& p, cudaStream_t s) { return flash::run_fwd_<T, D>(p, s); }
#define SM90_LAUNCHER(T, TN, D) \
  cudaError_t check_sm90_##TN##_##D(const flash::FwdParams& p, cudaStream_t s) { return flash::sm90::run_fwd_<T, D>(p, s); }
// The persistent kernel of the tile table's tile, CTAS CTAs (-1: one per SM). Only launch_fwd_persistent
// is instantiated here (with FLASH_ATTN_CUDA_SM90_PERSISTENT), never run_fwd_ / launch_fwd, whose
// bodies differ with the macro: no two definitions of one symbol across the parts.
#define SM90_PERSISTENT(T, TN, D, SUFFIX, CTAS) SM90_PERSISTENT_OF(TN, D, SUFFIX, CTAS, flash::sm90::FwdTraitsFor<T, D>)
#define SM90_PERSISTENT_OF(TN, D, SUFFIX, CTAS, ...) /* ...: the traits type (may hold commas) */     \
  cudaError_t check_sm90_##TN##_##D##_##SUFFIX(const flash::FwdParams& p, cudaStream_t s) {         \
    using Traits = __VA_ARGS__;                                                                      \
    flash::FwdParams q = p;                                                                          \
    q.sm90_persistent_ctas = CTAS;                                                                   \
    q.sm90_tiles.counter = bench::sm90_tile_counter();                                               \
    const auto kp = flash::sm90::FwdTma<Traits>::make_params(q);                                     \
    return flash::is_causal(q) ? flash::sm90::launch_fwd_persistent<Traits, true, false>(kp, s)      \
                               : flash::sm90::launch_fwd_persistent<Traits, false, false>(kp, s);    \
  }
#define SM90_TILE(NAME, D, N, STAGES, OVERLAP)                                  \
  cudaError_t check_sm90_bf16_##NAME(const flash::FwdParams& p, cudaStream_t s) { \
    return flash::sm90::launch_fwd<flash::sm90::FwdTraits<D, N, STAGES, cutlass::bfloat16_t, OVERLAP>>(p, s); \
  }

#if SM90_CHECK_PART == 1
#include "fwd_launch.h"
SM80_LAUNCHER(cutlass::bfloat16_t, bf16, 128)
#elif SM90_CHECK_PART == 2
#include "sm90/fwd_launch.h"
SM90_LAUNCHER(cutlass::bfloat16_t, bf16, 128)
SM90_TILE(128_n128_plain, 128, 128, 2, false)
#elif SM90_CHECK_PART == 3
#include "fwd_launch.h"
SM80_LAUNCHER(cutlass::half_t, fp16, 128)
#elif SM90_CHECK_PART == 4
#include "sm90/fwd_launch.h"
SM90_LAUNCHER(cutlass::half_t, fp16, 128)
#elif SM90_CHECK_PART == 5
// Tuning candidates, each in its own TU; main links whichever built (weak declarations).
#include "sm90/fwd_launch.h"
SM90_TILE(128_n176, 128, 176, 2, true)
#elif SM90_CHECK_PART == 6
#include "fwd_launch.h"
SM80_LAUNCHER(cutlass::bfloat16_t, bf16, 64)
SM80_LAUNCHER(cutlass::bfloat16_t, bf16, 256)
#elif SM90_CHECK_PART == 7
#include "sm90/fwd_launch.h"
SM90_LAUNCHER(cutlass::bfloat16_t, bf16, 64)
#elif SM90_CHECK_PART == 8
#include "sm90/fwd_launch.h"
SM90_LAUNCHER(cutlass::bfloat16_t, bf16, 256)
#elif SM90_CHECK_PART == 9
#include "fwd_launch.h"
SM80_LAUNCHER(cutlass::half_t, fp16, 64)
SM80_LAUNCHER(cutlass::half_t, fp16, 256)
#elif SM90_CHECK_PART == 10
#include "sm90/fwd_launch.h"
SM90_LAUNCHER(cutlass::half_t, fp16, 64)
SM90_LAUNCHER(cutlass::half_t, fp16, 256)
#elif SM90_CHECK_PART == 11
#include "sm90/fwd_launch.h"
SM90_TILE(64_n192, 64, 192, 2, true)
#elif SM90_CHECK_PART == 12
#include "sm90/fwd_launch.h"
SM90_TILE(256_n64, 256, 64, 2, true)
#elif SM90_CHECK_PART >= 13 && SM90_CHECK_PART <= 15
#define FLASH_ATTN_CUDA_SM90_PERSISTENT
#include "sm90/fwd_launch.h"
#if SM90_CHECK_PART == 13
SM90_PERSISTENT(cutlass::bfloat16_t, bf16, 128, persistent, -1)
SM90_PERSISTENT(cutlass::bfloat16_t, bf16, 128, persistent3, 3)
#elif SM90_CHECK_PART == 14
SM90_PERSISTENT(cutlass::bfloat16_t, bf16, 64, persistent, -1)
SM90_PERSISTENT(cutlass::bfloat16_t, bf16, 64, persistent3, 3)
#else
SM90_PERSISTENT(cutlass::bfloat16_t, bf16, 256, persistent, -1)
SM90_PERSISTENT(cutlass::bfloat16_t, bf16, 256, persistent3, 3)
#endif
#elif SM90_CHECK_PART == 16
#define FLASH_ATTN_CUDA_SM90_PERSISTENT
#define FLASH_ATTN_SM90_WATCHDOG
#include "sm90/fwd_launch.h"
// A type of its own: the watchdog kernel must not share a symbol with part 13's (same tile).
struct WatchdogTraits128 : flash::sm90::FwdTraitsFor<cutlass::bfloat16_t, 128> {};
SM90_PERSISTENT_OF(bf16, 128, persistent_wd3, 3, WatchdogTraits128)
#else
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "sm90/fwd_supports.h"  // host-only: which calls the family serves (checked below)

// Weak: a launcher whose TU did not build (tuning candidates) is null and skipped.
#define DECL(NAME) __attribute__((weak)) cudaError_t check_##NAME(const flash::FwdParams& p, cudaStream_t s);
DECL(sm80_bf16_64) DECL(sm80_bf16_128) DECL(sm80_bf16_256) DECL(sm80_fp16_64) DECL(sm80_fp16_128) DECL(sm80_fp16_256)
DECL(sm90_bf16_64) DECL(sm90_bf16_128) DECL(sm90_bf16_256) DECL(sm90_fp16_64) DECL(sm90_fp16_128) DECL(sm90_fp16_256)
DECL(sm90_bf16_128_n128_plain) DECL(sm90_bf16_128_n176) DECL(sm90_bf16_64_n192) DECL(sm90_bf16_256_n64)
DECL(sm90_bf16_128_persistent) DECL(sm90_bf16_128_persistent3) DECL(sm90_bf16_64_persistent)
DECL(sm90_bf16_64_persistent3) DECL(sm90_bf16_256_persistent) DECL(sm90_bf16_256_persistent3)
DECL(sm90_bf16_128_persistent_wd3)

namespace {

using bf16 = __nv_bfloat16;
using fp16 = __half;
__host__ __device__ inline float tof(bf16 x) { return __bfloat162float(x); }
__host__ __device__ inline float tof(fp16 x) { return __half2float(x); }
__device__ inline void fromf(float x, bf16& y) { y = __float2bfloat16(x); }
__device__ inline void fromf(float x, fp16& y) { y = __float2half(x); }

#define CK(x)                                                                                   \
  do {                                                                                          \
    cudaError_t e_ = (x);                                                                       \
    if (e_ != cudaSuccess) {                                                                    \
      std::fprintf(stderr, "CUDA error %s at %s:%d: %s\n", cudaGetErrorString(e_), __FILE__, __LINE__, #x); \
      std::exit(2);                                                                             \
    }                                                                                           \
  } while (0)

// exact: O and LSE must equal the first variant's (the one-tile kernel) bit for bit (the persistent
// kernel runs the same arithmetic per tile); timed: in bench(); small: also under --small (sanitizers).
struct Variant { const char* name; LaunchFn fn; bool exact = false, timed = true, small = false; };
// One (dtype, head dim): the sm80 kernel and the sm90 variants, the first being run_fwd_'s tile.
struct Family { bool fp16; int d; LaunchFn sm80; std::vector<Variant> sm90; };
std::vector<Family> families() {
  return {
      {false, 128, check_sm80_bf16_128,
       {{"sm90 tile", check_sm90_bf16_128}, {"128x128 no-overlap", check_sm90_bf16_128_n128_plain},
        {"128x176", check_sm90_bf16_128_n176},
        {"persistent wd x3", check_sm90_bf16_128_persistent_wd3, true, false},  // not under the sanitizers: slowed, a wait could pass the watchdog budget
        {"persistent", check_sm90_bf16_128_persistent, true},
        {"persistent x3", check_sm90_bf16_128_persistent3, true, false, true}}},
      {true, 128, check_sm80_fp16_128, {{"sm90 tile", check_sm90_fp16_128}}},
      {false, 64, check_sm80_bf16_64, {{"sm90 tile", check_sm90_bf16_64}, {"128x192", check_sm90_bf16_64_n192},
        {"persistent", check_sm90_bf16_64_persistent, true},
        {"persistent x3", check_sm90_bf16_64_persistent3, true, false, true}}},
      {true, 64, check_sm80_fp16_64, {{"sm90 tile", check_sm90_fp16_64}}},
      {false, 256, check_sm80_bf16_256, {{"sm90 tile", check_sm90_bf16_256}, {"128x64", check_sm90_bf16_256_n64},
        {"persistent", check_sm90_bf16_256_persistent, true},
        {"persistent x3", check_sm90_bf16_256_persistent3, true, false, true}}},
      {true, 256, check_sm80_fp16_256, {{"sm90 tile", check_sm90_fp16_256}}},
  };
}

// Deterministic hash -> uniform [-1, 1).
__device__ float hash_unit(uint64_t i, uint32_t seed) {
  uint64_t x = i * 0x9E3779B97F4A7C15ull + seed * 0xD1B54A32D192ED03ull;
  x ^= x >> 31; x *= 0xBF58476D1CE4E5B9ull; x ^= x >> 29; x *= 0x94D049BB133111EBull; x ^= x >> 32;
  return float(uint32_t(x) >> 8) * (2.f / 16777216.f) - 1.f;
}
template <typename T>
__global__ void fill(T* p, size_t n, uint32_t seed, float scale) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    fromf(scale * hash_unit(i, seed), p[i]);
}

// One thread per (b, h, i): fp32 softmax(scale q k^T) v with the kernels' masks.
template <typename T>
__global__ void ref_fwd(flash::FwdParams p, float* o_ref, float* lse_ref) {
  const int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (idx >= int64_t(p.batch) * p.nheads * p.seqlen_q) return;
  const int i = idx % p.seqlen_q, h = (idx / p.seqlen_q) % p.nheads, b = idx / (int64_t(p.seqlen_q) * p.nheads);
  const int hk = h / (p.nheads / p.nheads_k), d = p.headdim;
  const T* q = static_cast<const T*>(p.q_ptr) + b * p.q_batch_stride + i * p.q_row_stride + h * p.q_head_stride;
  const T* k = static_cast<const T*>(p.k_ptr) + b * p.k_batch_stride + hk * p.k_head_stride;
  const T* v = static_cast<const T*>(p.v_ptr) + b * p.v_batch_stride + hk * p.v_head_stride;
  const bool causal = p.window_left < 0 && p.window_right == 0;
  const int jend = causal ? min(p.seqlen_k, i + p.seqlen_k - p.seqlen_q + 1) : p.seqlen_k;
  float m = -INFINITY;
  for (int j = 0; j < jend; ++j) {
    float s = 0.f;
    for (int c = 0; c < d; ++c) s += tof(q[c]) * tof(k[j * p.k_row_stride + c]);
    m = fmaxf(m, s * p.softmax_scale);
  }
  float acc[256];
  for (int c = 0; c < d; ++c) acc[c] = 0.f;
  float sum = 0.f;
  for (int j = 0; j < jend; ++j) {
    float s = 0.f;
    for (int c = 0; c < d; ++c) s += tof(q[c]) * tof(k[j * p.k_row_stride + c]);
    const float e = expf(s * p.softmax_scale - m);
    sum += e;
    for (int c = 0; c < d; ++c) acc[c] += e * tof(v[j * p.v_row_stride + c]);
  }
  float* o = o_ref + ((int64_t(b) * p.seqlen_q + i) * p.nheads + h) * d;
  for (int c = 0; c < d; ++c) o[c] = sum > 0.f ? acc[c] / sum : 0.f;
  lse_ref[(int64_t(b) * p.nheads + h) * p.seqlen_q + i] = sum > 0.f ? m + logf(sum) : -INFINITY;
}

struct Err { double o = 0, lse = 0; bool nan = false; };

template <typename T>
Err compare(const flash::FwdParams& p, const std::vector<float>& o_ref, const std::vector<float>& lse_ref) {
  const size_t no = size_t(p.batch) * p.seqlen_q * p.nheads * p.headdim, nl = size_t(p.batch) * p.nheads * p.seqlen_q;
  std::vector<T> o(no);
  std::vector<float> lse(nl);
  CK(cudaMemcpy(o.data(), p.o_ptr, no * sizeof(T), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(lse.data(), p.lse_ptr, nl * sizeof(float), cudaMemcpyDeviceToHost));
  Err e;
  for (size_t i = 0; i < no; ++i) {
    const float x = tof(o[i]);
    if (std::isnan(x)) { e.nan = true; continue; }
    e.o = std::max(e.o, double(std::fabs(x - o_ref[i])));
  }
  for (size_t i = 0; i < nl; ++i) {
    if (std::isnan(lse[i])) { e.nan = true; continue; }
    if (std::isinf(lse_ref[i]) || std::isinf(lse[i])) {
      if (lse[i] != lse_ref[i]) e.lse = INFINITY;
      continue;
    }
    e.lse = std::max(e.lse, double(std::fabs(lse[i] - lse_ref[i])));
  }
  return e;
}

// The bytes of O and LSE after a run: the persistent kernel's must equal the one-tile kernel's.
std::vector<char> snapshot(const flash::FwdParams& p) {
  const size_t no = size_t(p.batch) * p.seqlen_q * p.nheads * p.headdim * 2, nl = size_t(p.batch) * p.nheads * p.seqlen_q * 4;
  std::vector<char> bytes(no + nl);
  CK(cudaMemcpy(bytes.data(), p.o_ptr, no, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(bytes.data() + no, p.lse_ptr, nl, cudaMemcpyDeviceToHost));
  return bytes;
}

struct Buffers { void *q, *k, *v, *o; float* lse; };

// Dense q/o (b, sq, h, d); k/v (b, sk, hk, d) with `pad` extra elements after every head row.
flash::FwdParams make_params(const Buffers& buf, int b, int sq, int sk, int h, int hk, int d, bool causal, int pad) {
  flash::FwdParams p;
  p.q_ptr = buf.q; p.k_ptr = buf.k; p.v_ptr = buf.v; p.o_ptr = buf.o; p.lse_ptr = buf.lse;
  p.q_head_stride = d; p.q_row_stride = int64_t(h) * d; p.q_batch_stride = int64_t(sq) * h * d;
  p.o_head_stride = d; p.o_row_stride = int64_t(h) * d; p.o_batch_stride = int64_t(sq) * h * d;
  const int64_t kh = d + pad;
  p.k_head_stride = kh; p.k_row_stride = hk * kh; p.k_batch_stride = int64_t(sk) * hk * kh;
  p.v_head_stride = kh; p.v_row_stride = hk * kh; p.v_batch_stride = int64_t(sk) * hk * kh;
  p.batch = b; p.seqlen_q = sq; p.seqlen_k = sk; p.nheads = h; p.nheads_k = hk;
  p.headdim = d; p.headdim_rounded = d;
  p.softmax_scale = 1.f / std::sqrt(float(d));
  p.scale_log2 = p.softmax_scale * 1.4426950408889634f;
  p.window_left = -1; p.window_right = causal ? 0 : -1;
  p.dtype = flash::DType::kBFloat16;
  return p;
}

template <typename T = bf16>
Buffers alloc(size_t nq, size_t nkv, size_t nlse) {
  Buffers b;
  CK(cudaMalloc(&b.q, nq * 2)); CK(cudaMalloc(&b.o, nq * 2));
  CK(cudaMalloc(&b.k, nkv * 2)); CK(cudaMalloc(&b.v, nkv * 2));
  CK(cudaMalloc(&b.lse, nlse * sizeof(float)));
  fill<<<1024, 256>>>(static_cast<T*>(b.q), nq, 1, 1.5f);
  fill<<<1024, 256>>>(static_cast<T*>(b.k), nkv, 2, 1.5f);
  fill<<<1024, 256>>>(static_cast<T*>(b.v), nkv, 3, 1.f);
  CK(cudaGetLastError());
  return b;
}
void release(Buffers& b) { cudaFree(b.q); cudaFree(b.k); cudaFree(b.v); cudaFree(b.o); cudaFree(b.lse); }

void run_checked(LaunchFn fn, const flash::FwdParams& p) {
  const size_t no = size_t(p.batch) * p.seqlen_q * p.nheads * p.headdim, nl = size_t(p.batch) * p.nheads * p.seqlen_q;
  CK(cudaMemset(p.o_ptr, 0xFF, no * 2));  // bf16 NaN
  CK(cudaMemset(p.lse_ptr, 0xFF, nl * 4));
  CK(fn(p, 0));
  CK(cudaDeviceSynchronize());
}

// small: one ragged shape per mask (for compute-sanitizer).
template <typename T>
int check(bool small, const Family& fam) {
  const int b = 2, h = 4, hk = 2, d = fam.d;
  const LaunchFn sm80 = fam.sm80;
  int failures = 0;
  const std::vector<int> sqs = small ? std::vector<int>{113} : std::vector<int>{1, 113, 128, 1000};
  const std::vector<int> sks = small ? std::vector<int>{77, 200} : std::vector<int>{1, 77, 128, 1000, 2048};
  for (int sq : sqs) for (int sk : sks) for (int causal : {0, 1}) {
    const int pad = (sq + sk) % 2 ? 8 : 0;
    Buffers buf = alloc<T>(size_t(b) * sq * h * d, size_t(b) * sk * hk * (d + pad), size_t(b) * h * sq);
    flash::FwdParams p = make_params(buf, b, sq, sk, h, hk, d, causal, pad);
    if (std::is_same_v<T, fp16>) p.dtype = flash::DType::kFloat16;
    float *o_ref_d, *lse_ref_d;
    const size_t no = size_t(b) * sq * h * d, nl = size_t(b) * h * sq;
    CK(cudaMalloc(&o_ref_d, no * 4)); CK(cudaMalloc(&lse_ref_d, nl * 4));
    ref_fwd<T><<<(nl + 127) / 128, 128>>>(p, o_ref_d, lse_ref_d);
    CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
    std::vector<float> o_ref(no), lse_ref(nl);
    CK(cudaMemcpy(o_ref.data(), o_ref_d, no * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(lse_ref.data(), lse_ref_d, nl * 4, cudaMemcpyDeviceToHost));
    run_checked(sm80, p);
    const Err e80 = compare<T>(p, o_ref, lse_ref);
    std::printf("%s d=%d sq=%4d sk=%4d causal=%d pad=%d | sm80 O %.2e LSE %.2e%s", std::is_same_v<T, fp16> ? "fp16" : "bf16", d, sq, sk, causal, pad, e80.o, e80.lse,
                e80.nan ? " NaN" : "");
    std::vector<char> tile_bytes;  // the one-tile kernel's (first variant's) O and LSE
    for (const Variant& v : fam.sm90) {
      if (v.fn == nullptr || (small && &v != &fam.sm90[0] && !v.small)) continue;  // --small: tile + persistent x3
      std::fflush(stdout);  // a hang shows the variant it is in
      run_checked(v.fn, p);
      const Err e = compare<T>(p, o_ref, lse_ref);
      bool ok = !e.nan && e.o <= 2 * e80.o + 1e-3 && e.lse <= 2 * e80.lse + 1e-3;
      if (&v == &fam.sm90[0]) tile_bytes = snapshot(p);
      const bool differs = v.exact && snapshot(p) != tile_bytes;
      ok = ok && !differs;
      failures += !ok;
      std::printf(" | %s O %.2e LSE %.2e%s %s", v.name, e.o, e.lse, v.exact ? (differs ? " !=tile" : " ==tile") : "",
                  ok ? "ok" : (e.nan ? "NaN FAIL" : "FAIL"));
    }
    std::printf("\n");
    cudaFree(o_ref_d); cudaFree(lse_ref_d);
    release(buf);
  }
  return failures;
}

// fwd_supports: the served options and the TMA alignment rules, accepted and refused cases.
int check_supports() {
  flash::FwdParams p;
  alignas(16) static char buf[64];
  p.q_ptr = p.k_ptr = p.v_ptr = buf; p.o_ptr = buf; p.lse_ptr = reinterpret_cast<float*>(buf);
  p.batch = 2; p.seqlen_q = 113; p.seqlen_k = 77; p.nheads = 4; p.nheads_k = 2; p.headdim = p.headdim_rounded = 128;
  p.q_row_stride = p.o_row_stride = 512; p.q_head_stride = p.o_head_stride = 128;
  p.q_batch_stride = p.o_batch_stride = 113 * 512;
  p.k_row_stride = p.v_row_stride = 256; p.k_head_stride = p.v_head_stride = 128;
  p.k_batch_stride = p.v_batch_stride = 77 * 256;
  int bad = 0;
  auto expect = [&](bool want, const char* what) {
    if (flash::sm90::fwd_supports(p) != want) { std::printf("fwd_supports FAIL: %s\n", what); ++bad; }
  };
  expect(true, "bf16 d=128");
  p.dtype = flash::DType::kFloat16; expect(true, "fp16");
  p.window_right = 0; expect(true, "causal");
  p.window_right = 5; expect(false, "right window");
  p.window_right = -1; p.window_left = 3; expect(false, "left window");
  p.window_left = -1; p.softcap = 1.f; expect(false, "softcap");
  p.softcap = 0.f; p.headdim = 96; expect(false, "d=96 rounded to 128");
  p.headdim = p.headdim_rounded = 64; expect(true, "d=64");
  p.headdim = p.headdim_rounded = 256; expect(true, "d=256");
  p.headdim = p.headdim_rounded = 32; expect(false, "d=32");
  p.headdim = p.headdim_rounded = 128; p.q_row_stride = 516; expect(false, "q row stride % 8");
  p.q_row_stride = 512; p.q_ptr = buf + 2; expect(false, "misaligned q");
  p.q_ptr = buf; p.k_head_stride = 0; expect(false, "zero head stride");
  p.k_head_stride = 128; p.nheads = 6; expect(false, "nheads % nheads_k");
  p.nheads = 4; expect(true, "restored");
  std::printf("fwd_supports: %d failure(s)\n", bad);
  return bad;
}

int exact_failures = 0;  // bench(): persistent variants that differ from the tile at a timed shape

double time_ms(LaunchFn fn, const flash::FwdParams& p, int reps = 20) {
  cudaEvent_t a, z;
  CK(cudaEventCreate(&a)); CK(cudaEventCreate(&z));
  for (int i = 0; i < 3; ++i) CK(fn(p, 0));
  std::vector<float> t;
  for (int i = 0; i < reps; ++i) {
    CK(cudaEventRecord(a)); CK(fn(p, 0)); CK(cudaEventRecord(z)); CK(cudaEventSynchronize(z));
    float ms; CK(cudaEventElapsedTime(&ms, a, z)); t.push_back(ms);
  }
  std::sort(t.begin(), t.end());
  cudaEventDestroy(a); cudaEventDestroy(z);
  return t[t.size() / 2];
}

void bench(const Family& fam) {
  const int d = fam.d, h = 2048 / d;
  std::printf("\nFA2 grid, %s, d=%d, h=%d, batch*seqlen=16k: TFLOP/s (median of 20)\n", fam.fp16 ? "fp16" : "bf16", d, h);
  for (int causal : {0, 1}) for (int s : {1024, 4096, 16384}) {
    const int b = 16384 / s;
    Buffers buf = fam.fp16 ? alloc<fp16>(size_t(b) * s * h * d, size_t(b) * s * h * d, size_t(b) * h * s)
                           : alloc<bf16>(size_t(b) * s * h * d, size_t(b) * s * h * d, size_t(b) * h * s);
    flash::FwdParams p = make_params(buf, b, s, s, h, h, d, causal, 0);
    if (fam.fp16) p.dtype = flash::DType::kFloat16;
    const double flops = 4.0 * b * double(s) * s * h * d / (causal ? 2 : 1);
    // The persistent variants at the timed shape (several tiles per CTA): bit for bit the tile's output.
    std::vector<char> tile_bytes;
    for (const Variant& v : fam.sm90) {
      if (!v.fn || !v.exact) continue;
      if (tile_bytes.empty()) { run_checked(fam.sm90[0].fn, p); tile_bytes = snapshot(p); }
      std::printf("  [%s at seqlen %d causal %d ...", v.name, s, causal);
      std::fflush(stdout);
      run_checked(v.fn, p);
      const bool same = snapshot(p) == tile_bytes;
      exact_failures += !same;
      std::printf(" %s]\n", same ? "== tile" : "DIFFERS from the tile: FAIL");
    }
    std::printf("seqlen %5d causal %d | sm80 %6.1f", s, causal, flops / time_ms(fam.sm80, p) / 1e9);
    for (const Variant& v : fam.sm90) {
      if (!v.fn || !v.timed) continue;
      std::fflush(stdout);
      std::printf(" | %s %6.1f", v.name, flops / time_ms(v.fn, p) / 1e9);
    }
    std::printf("\n");
    release(buf);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // line-buffered through pipes: a hang shows where it is
  // --check: correctness only; --small: one ragged shape per mask, no timing (compute-sanitizer).
  const std::string_view mode = argc > 1 ? argv[1] : "";
  const bool small = mode == "--small";
  // Every (dtype, d) whose TUs built is checked; bf16 of every d and fp16 d=128 are timed.
  int failures = check_supports();
  for (const Family& fam : families()) {
    if (fam.sm80 == nullptr || fam.sm90.empty() || fam.sm90[0].fn == nullptr) continue;
    failures += fam.fp16 ? check<fp16>(small, fam) : check<bf16>(small, fam);
  }
  const bool check_only = mode == "--check" || mode == "--small";
  std::printf("check: %d failure(s)\n", failures);
  if (!check_only)
    for (const Family& fam : families())
      if (fam.sm80 && !fam.sm90.empty() && fam.sm90[0].fn && (!fam.fp16 || fam.d == 128)) bench(fam);
  if (!check_only) std::printf("persistent == tile at the timed shapes: %d failure(s)\n", exact_failures);
  return failures + exact_failures ? 1 : 0;
}
#endif
