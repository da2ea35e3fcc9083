// The torch-free entry points of the kernel library. The torch binding and the C++ benchmarks
// use only this header (plus params.h).
#pragma once

#include <cuda_runtime.h>

#include <vector>

#include "params.h"
#include "smem_budget.h"

namespace flash {

// True when the kernels implement these sizes and options (both directions use it).
bool params_supported(const FwdParams& params);

// Runs the forward pass on `stream`, on the family fwd_family(params) picks for the current device;
// a call the persistent sm90 kernel (the default build's) would run with tiles drawn from a counter
// (causal, and d = 64: sm90::fwd_draws_tiles) needs params.sm90_tiles.counter (one int of device
// memory, not shared by concurrent launches), else the sm80 kernels run it.
// params.headdim_rounded must be one of compiled_head_dims() and params.dtype one of
// compiled_dtypes(); otherwise returns cudaErrorInvalidValue and launches nothing. Returns the
// launch's error status; `ran` (if given) receives the family that ran (kSm80 or kSm90).
cudaError_t run_fwd(const FwdParams& params, cudaStream_t stream, FwdFamily* ran = nullptr);

// The family run_fwd(params) runs on the current device: kSm90 when params.family asks for it (kSm90,
// or kAuto with kSm90ByDefault), the
// build compiled sm90 for (dtype, headdim_rounded), the device has compute capability 9.0 and
// sm90::fwd_supports(params); else kSm80. Never kAuto.
FwdFamily fwd_family(const FwdParams& params);

// Whether an sm90 forward call needs params.sm90_tiles.counter: the persistent kernel would run it
// and draws its tiles from the counter (causal, and d = 64: sm90::fwd_draws_tiles).
bool sm90_fwd_needs_tile_counter(const FwdParams& params);
inline const char* family_name(FwdFamily f) { return f == FwdFamily::kSm90 ? "sm90" : f == FwdFamily::kSm80 ? "sm80" : "auto"; }

// Head dims the sm90 family compiled (every compiled dtype); empty without 90a in the build.
std::vector<int> sm90_head_dims();

// Whether the current device has compute capability 9.0, the one sm_90a code runs on (cached).
bool current_device_is_sm90();
// The sm90 families' tiles are sized for the whole 227 KB of compute capability 9.0: a budget
// capped below it (FLASH_ATTN_CUDA_SMEM_BUDGET) runs the sm80 family.
constexpr int kSm90SmemBudgetBytes = 227 * 1024;

// What this build compiled (FLASH_ATTN_CUDA_HDIMS / FLASH_ATTN_CUDA_DTYPES at build time).
std::vector<int> compiled_head_dims();
std::vector<DType> compiled_dtypes();

// The smallest compiled head dim >= headdim, or -1 if there is none.
int round_head_dim(int headdim);

// The shared memory the dispatch may plan for on the current device: its
// cudaDevAttrMaxSharedMemoryPerBlockOptin (227 KB sm90, 163 KB sm80, 99 KB sm86/sm89), capped by
// params.smem_budget_kb when that is > 0. Below 227 KB the forward runs the sm80 family.
int smem_budget_bytes(const FwdParams& params);

// The sm80-family forward tile run_fwd launches for params on the current device (the head dim's
// row for smem_budget_bytes(params), smem_budget.h); smem_bytes -1 when no tile fits or the head
// dim is not compiled (run_fwd then launches nothing).
KernelTile fwd_tile(const FwdParams& params);

// Dynamic shared memory of the default (227 KB row) sm80-family forward tile of a compiled head
// dim (-1 if not compiled). The C++ benchmarks report it; the dispatch uses fwd_tile.
int fwd_shared_memory_bytes(int headdim_rounded);
// ... and of its smallest (99 KB row) tile: below that budget the forward refuses.
int fwd_smallest_shared_memory_bytes(int headdim_rounded);

// Backward (only in builds with FLASH_ATTN_CUDA_BACKWARD=1): D pre-pass, main kernel, dQ
// conversion on `stream`. The caller allocates the scratch buffers params.h describes, with
// params.seqlen_q_rounded = bwd_rows_rounded(seqlen_q) (and, varlen, params.varlen_scratch_rows =
// bwd_varlen_scratch_rows(total_q, batch)); dq_accum needs no zeroing (each family's launch does it).
// `ran` (if given) receives the family of the main kernel it launched (as run_fwd's).
cudaError_t run_bwd(const BwdParams& params, cudaStream_t stream, FwdFamily* ran = nullptr);
constexpr int bwd_rows_rounded(int seqlen_q) { return (seqlen_q + kBwdRowAlign - 1) / kBwdRowAlign * kBwdRowAlign; }
int bwd_shared_memory_bytes(int headdim_rounded);           // the default (227 KB row) tile's
int bwd_smallest_shared_memory_bytes(int headdim_rounded);  // the 99 KB row's
// The family of run_bwd's main kernel on the current device, as fwd_family: kSm90 when
// params.family asks for it (kSm90, or kAuto with kSm90BwdByDefault for bf16 and d != 256 unless
// kSm90BwdHdim256ByDefault), the build compiled the sm90 backward for (dtype, headdim_rounded) (and its
// dropout variant when the call has dropout), the device is 9.0 and sm90::bwd_supports(params); else
// kSm80. Each family runs its own pre-pass and dQ conversion (sm90: sm90/bwd_passes.h).
FwdFamily bwd_family(const BwdParams& params);
// The backward tile run_bwd launches for params on the current device (as fwd_tile); the
// deterministic dq_accum splits (bwd_dq_accum_splits) follow its block_n.
KernelTile bwd_tile(const BwdParams& params);

// How many dq_accum slices a backward call needs: 1 unless params.deterministic, else enough
// thread blocks to fill num_sms SMs (at most one per K/V block). Set params.num_dq_splits to it
// and allocate num_dq_splits * batch * nheads * seqlen_q_rounded * headdim_rounded floats
// (varlen: num_dq_splits * nheads * varlen_scratch_rows * headdim_rounded).
int bwd_dq_accum_splits(const BwdParams& params, int num_sms);
// How many int32 dq_semaphore_ptr needs: batch * nheads * seqlen_q_rounded / kBwdSemaphoreRows when
// a deterministic call will run the sm90 backward (its dQ adds take turns there), or a call of an sm90
// kernel that stores each dQ tile's first part (sm90/bwd_api.h bwd_store_first); else 0. Call
// with every field but the scratch pointers set (seqlen_q_rounded and family included); then
// bwd_dq_accum_splits is 1.
int64_t bwd_dq_semaphores(const BwdParams& params);

// KV-cache attention (only in builds with FLASH_ATTN_CUDA_KVCACHE=1; params.h, KvCacheParams):
// appends the new keys/values (rotated) into the cache, attends, combines the splits, on `stream`.
// The caller sets params.num_splits (kvcache_num_splits, or the user's count) and, when it is > 1,
// allocates oaccum / lse_accum; with a rotary embedding, q_ptr is a (batch, seqlen_q, nheads, d)
// buffer the rotated q is written to from q_in_ptr.
cudaError_t run_kvcache(const KvCacheParams& params, cudaStream_t stream);
bool kvcache_params_supported(const KvCacheParams& params);
// Splits of the key axis that fill num_sms SMs (smem_per_sm bytes each), from static shapes only:
// batch, heads, seqlen_q and the cache's capacity (params.seqlen_k).
int kvcache_num_splits(const KvCacheParams& params, int num_sms, int smem_per_sm);
int kvcache_shared_memory_bytes(int headdim_rounded);

// The dropout keep-mask of a forward call (testing hook; dropout_mask.cu): mask (batch, nheads,
// seqlen_q, seqlen_k) uint8, 1 where the kernels keep the element, from rng_state (device int64 (2,):
// seed, offset, as the forward wrote it) and threshold = FwdParams.dropout_threshold. Varlen: rows
// and columns count from each sequence's start, b is the sequence index.
cudaError_t run_dropout_mask(const int64_t* rng_state, int batch, int nheads, int seqlen_q, int seqlen_k,
                             uint32_t threshold, uint8_t* mask, cudaStream_t stream);

// Largest seqlen the int32 index arithmetic of the kernels admits.
constexpr int kMaxSeqlen = (1 << 30);

}  // namespace flash
