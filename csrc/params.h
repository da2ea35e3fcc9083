// Torch-free parameters of one attention call. The binding fills them from tensors; the C++
// benchmarks fill them from cudaMalloc'd buffers. Kernels see nothing else.
#pragma once

#include <cstdint>

#include "host_device.h"


namespace flash {

// Element type of q/k/v/out. Kept as a plain enum so this header needs no CUDA types.
enum class DType : int { kFloat16 = 0, kBFloat16 = 1 };

// Forward kernel family (fwd_dispatch.cu). kSm90 asks for sm90 (the Hopper kernels, csrc/sm90/): it
// runs on a GPU of compute capability 9.0 when the build compiled it for (dtype, headdim_rounded) and
// it implements the call's options (sm90::fwd_supports), else sm80 (every GPU, every option), never
// an error. kAuto is kSm90 when kSm90ByDefault, else kSm80; kSm80 forces the sm80 kernels. Tests and benchmarks set it (FLASH_ATTN_CUDA_FAMILY,
// bench_fwd --family). Both families write the same out and lse, so the backward is unchanged.
enum class FwdFamily : int { kAuto = 0, kSm80 = 1, kSm90 = 2 };

// The seed and offset of PyTorch's CUDA generator for one call, torch-free (the fields of
// at::PhiloxCudaState): the values, or under CUDA-graph capture device pointers that each replay
// updates plus this call's offset within the graph (the kernels read them: dropout.h).
struct PhiloxState {
  uint64_t seed = 0, offset = 0;
  const int64_t* seed_ptr = nullptr;
  const int64_t* offset_ptr = nullptr;
  uint64_t offset_intragraph = 0;
  bool captured = false;
};

// Whether kAuto picks the sm90 family: on since the package's GPU tests ran it through the binding
// on the H200 (tests/test_attention_gpu.py, test_backward_gpu.py family-parametrised, the SDPA and
// transformers drop-in tests; benchmarks/NOTES.md "Hopper forward"). FLASH_ATTN_CUDA_FAMILY=sm80
// forces the sm80 kernels.
constexpr bool kSm90ByDefault = true;
// The same for the backward (bwd_dispatch.cu, sm90::bwd_supports): the family field asks for both
// directions. On for bf16 since its GPU tests passed and it ran 1.1-1.5x the sm80 backward on the
// H200 (benchmarks/NOTES.md "Hopper backward"), and for fp16 since its fp16 build did (2026-12-02:
// tests, racecheck / synccheck clean, 1.25-1.7x the sm80 backward, results/h200_fp16.md).
constexpr bool kSm90BwdByDefault = true;
// d = 256 (the role-split tile, sm90/bwd_mainloop_split.h) by default too: 1.3x the sm80 backward
// (results/h200_bwd256.md); on since each of its named barriers is synced from one instruction
// (synccheck had rejected kDSReady synced by both consumers' code, bwd_mainloop_split.h).
constexpr bool kSm90BwdHdim256ByDefault = true;
// Its dropout variant too, since its mask is made in registers (bwd_dropout.h make_flags): with a
// shared word buffer and a barrier of consumer 0 alone, compute-sanitizer racecheck reported consumer
// 0's sP store against consumer 1's sP read (48 hazards, H200, 2026-12-02; the plain tile: none).
constexpr bool kSm90BwdHdim256DropoutByDefault = true;

// Strides are in elements. The last dimension (headdim) of every tensor must be contiguous.
//
//   q:   (batch, seqlen_q, nheads,   headdim)   or packed (total_q, nheads, headdim) with cu_seqlens_q
//   k,v: (batch, seqlen_k, nheads_k, headdim)   or packed (total_k, nheads_k, headdim) with cu_seqlens_k
//   out: like q
//   lse: (batch, nheads, seqlen_q) float32, contiguous
//
// Which option combinations the kernels implement: params_supported (fwd_dispatch.cu).
// The persistent sm90 forward's tile order (csrc/sm90/fwd_scheduler.h). counter: one int of device
// memory from the caller, which the launch zeroes on the stream (cudaMemsetAsync) before a kernel that
// draws tiles from it (causal, and d = 64's tile: sm90::fwd_draws_tiles); a launch must not share it
// with another running at the same time; nullptr there: such a launch fails with cudaErrorInvalidValue
// (the dispatch sends the call to the sm80 kernels first). The rest is set by the launch; the kernel
// reads it from the constant bank (its producer thread has 32-40 registers: fwd_traits.h).
struct Sm90TileOrder {
  int* counter = nullptr;
  int section = 0;    // (batch, head) pairs per L2 section (causal_section_pairs)
  int num_m = 0;      // query blocks per (batch, head)
  int num_pairs = 0;  // nheads * batch
  int num_tiles = 0;  // num_m * num_pairs
};

struct FwdParams {
  // ---- pointers
  const void* __restrict__ q_ptr = nullptr;
  const void* __restrict__ k_ptr = nullptr;
  const void* __restrict__ v_ptr = nullptr;
  void* __restrict__ o_ptr = nullptr;
  float* __restrict__ lse_ptr = nullptr;

  // ---- strides (elements)
  int64_t q_batch_stride = 0, q_row_stride = 0, q_head_stride = 0;
  int64_t k_batch_stride = 0, k_row_stride = 0, k_head_stride = 0;
  int64_t v_batch_stride = 0, v_row_stride = 0, v_head_stride = 0;
  int64_t o_batch_stride = 0, o_row_stride = 0, o_head_stride = 0;

  // ---- sizes
  int batch = 0;
  int seqlen_q = 0;        // max over the batch when cu_seqlens_q is set
  int seqlen_k = 0;        // max over the batch when cu_seqlens_k is set
  int nheads = 0;          // query heads
  int nheads_k = 0;        // key/value heads; nheads % nheads_k == 0 (GQA/MQA when smaller)
  int headdim = 0;         // the real head dim d (d % 8 == 0)
  int headdim_rounded = 0; // the compiled kernel's head dim (>= headdim); columns past d are zero-filled

  // ---- softmax
  float softmax_scale = 0.f;       // usually 1/sqrt(d)
  float scale_log2 = 0.f;          // score unit * log2(e): softmax_scale * log2(e), or softcap * log2(e)
                                   // when softcap > 0 (score_mods.h); scores go straight into exp2

  // ---- masking. Key j is visible to query i (bottom-right aligned, as flash-attn >= 2.1) iff
  //   i + seqlen_k - seqlen_q - window_left <= j <= i + seqlen_k - seqlen_q + window_right,
  // a negative window side meaning unbounded. causal == (window_left < 0, window_right == 0).
  int window_left = -1;
  int window_right = -1;

  // ---- score modifiers (score_mods.h)
  float softcap = 0.f;                // > 0: scaled scores s -> softcap * tanh(s / softcap)
  float softcap_tanh_scale = 0.f;     // softmax_scale / softcap when softcap > 0 (tanh's argument per q.k)
  // ALiBi: query head h of batch b adds -slope * |i + seqlen_k - seqlen_q - j| to its scaled
  // scores, slope = alibi_slopes_ptr[b * alibi_slopes_batch_stride + h] (float32; stride 0 for
  // one slope per head). Not combined with softcap (params_supported).
  const float* alibi_slopes_ptr = nullptr;
  int64_t alibi_slopes_batch_stride = 0;

  // ---- variable-length batches (seq_info.h): q/k/v/out packed (total, nheads, d) with batch
  // strides 0; seqlen_q/k are the maxima over the batch (they size the grid); lse is
  // (nheads, total_q).
  const int* cu_seqlens_q = nullptr;  // (batch + 1,) int32 prefix sums
  const int* cu_seqlens_k = nullptr;  // (batch + 1,) int32 prefix sums
  int total_q = 0;                    // rows of q/out: cu_seqlens_q[batch] when the prefix sums are valid
  int total_k = 0;                    // rows of k/v: cu_seqlens_k[batch] likewise

  // ---- dropout (dropout.h, philox.h): dropout_p > 0 keeps each P element iff its 8-bit Philox
  // number < dropout_threshold = t = round((1 - p) * 256), t in [1, 256] (the binding refuses t = 0),
  // and scales the kept ones by rp_dropout = 256 / t (keep rate t / 256, within 1/512 of 1 - p). The forward reserves batch * nheads Philox counters at philox.offset and
  // writes (seed, offset) to rng_state_ptr (int64 (2,)); the backward reads them back from there
  // (philox.captured with seed_ptr / offset_ptr into that tensor).
  float dropout_p = 0.f;
  float rp_dropout = 1.f;
  uint32_t dropout_threshold = 256;
  PhiloxState philox;
  int64_t* rng_state_ptr = nullptr;

  DType dtype = DType::kBFloat16;
  FwdFamily family = FwdFamily::kAuto;
  // Cap on the shared memory per thread block the dispatch may plan for, in KB (0: none). The
  // tiles come from the GPU's opt-in limit (smem_budget.h) lowered to this cap; the binding sets it
  // from FLASH_ATTN_CUDA_SMEM_BUDGET, a testing knob that runs the 163 / 99 KB tiles on an H200.
  int smem_budget_kb = 0;
  // sm90 forward only: != 0 the persistent kernel (fwd_persistent.h, the default build's): > 0 at
  // most this many CTAs, < 0 one per SM, each looping over tiles; 0 one CTA per 128-row tile
  // (fwd_kernel.h) where the build compiled it (FLASH_ATTN_CUDA_SM90_PERSISTENT=0 or both), else the
  // persistent kernel with one CTA per SM (csrc/sm90/fwd_launch.h). The binding sets it from
  // FLASH_ATTN_CUDA_SM90_PERSISTENT_CTAS.
  int sm90_persistent_ctas = 0;
  // Persistent sm90 forward kernels that draw their tiles (causal, d = 64: sm90::fwd_draws_tiles;
  // fwd_scheduler.h's dynamic order). Last member: the one-tile kernel's parameter offsets stay.
  Sm90TileOrder sm90_tiles;
};

// Whether the options need the kMods instantiation (fwd_kernel.h, bwd_kernel.h): softcap, ALiBi,
// a left window edge, a varlen batch or dropout (its own kMods instantiation, kDropout). Builds
// with FLASH_ATTN_CUDA_FEATURES=0 refuse these.
inline bool needs_dropout(const FwdParams& p) { return p.dropout_p > 0.f; }
// Dropout works on whole 16 x 64 chunks of S (dropout.h, philox.h): tiles narrower than 64 keys (the
// smallest backward tiles of the 99 KB budget, bwd_tile_config.h) have no dropout kernel.
constexpr bool dropout_tile(int block_n) { return block_n % 64 == 0; }
// The options besides dropout (the sm90 forward has a dropout variant but none of these).
inline bool needs_mods_besides_dropout(const FwdParams& p) {
  return p.softcap > 0.f || p.window_left >= 0 || p.alibi_slopes_ptr != nullptr || p.cu_seqlens_q != nullptr;
}
inline bool needs_mods(const FwdParams& p) { return needs_mods_besides_dropout(p) || needs_dropout(p); }
// The plain causal mask (bottom-right aligned, no left edge): window (-1, 0).
FLASH_HD bool is_causal(const FwdParams& p) { return p.window_left < 0 && p.window_right == 0; }

// KV-cache attention (flash-attn's flash_attn_with_kvcache; decode_kernel.h): q attends to a cache
// that new keys/values are first appended to, in place (kvcache_append.h). FwdParams' k/v fields
// describe the cache:
//   contiguous: (batch_cache, seqlen_cache, nheads_k, d), k/v_batch_stride between cache rows
//   paged:      (num_pages, page_size, nheads_k, d), k/v_batch_stride between pages; sequence b's
//               slot a lives in page block_table[b * block_table_batch_stride + a / page_size]
// Sequence b sees cache slots [leftpad_b, cache_seqlens[b] + seqlen_new) (leftpad_b = 0 without
// cache_leftpad): seqlen_k of the masks is their count; FwdParams.seqlen_k is the capacity.
// Every index read from memory (lengths, pages, cache rows) is clamped so bad values give wrong
// numbers, never accesses outside the tensors.
// Queries are packed per K/V head: row r of (b, head_k) is token r / g of query head
// head_k * g + r % g (g = nheads / nheads_k), so one thread block reads K/V once per group.
// num_splits > 1: split s of the key range writes normalised partial outputs and LSEs
//   oaccum:    (num_splits, batch, nheads, seqlen_q, headdim_rounded) float32
//   lse_accum: (num_splits, batch, nheads, seqlen_q) float32 (-inf where a split saw no key)
// and the combine kernel writes out and lse from them.
struct KvCacheParams : FwdParams {
  const int* cache_seqlens = nullptr;    // (batch,) tokens in each cache before this call's append;
                                         // null: every sequence fills the capacity (no append, no rotary)
  const int* cache_batch_idx = nullptr;  // (batch,) cache row of each batch element; null: b
  const int* cache_leftpad = nullptr;    // (batch,) first valid slot; null: 0
  const int* block_table = nullptr;      // (batch, max_pages) page indices; null: contiguous cache
  int64_t block_table_batch_stride = 0;
  int page_size = 0;     // paged only
  int page_shift = -1;   // log2(page_size) when it is a power of two (shift and mask, no division); else -1
  int num_pages = 0;     // paged: pages in the cache; contiguous: batch_cache (rows)
  int max_pages = 0;     // paged: block_table columns

  // New keys/values (batch, seqlen_new, nheads_k, d), written into slots cache_seqlens[b] + i.
  const void* __restrict__ knew_ptr = nullptr;
  const void* __restrict__ vnew_ptr = nullptr;
  int64_t knew_batch_stride = 0, knew_row_stride = 0, knew_head_stride = 0;
  int64_t vnew_batch_stride = 0, vnew_row_stride = 0, vnew_head_stride = 0;
  int seqlen_new = 0;

  // Rotary embedding of the new keys and of q (into q_ptr, a (batch, seqlen_q, nheads, d) buffer,
  // from q_in_ptr): cos/sin (seqlen_ro, rotary_dim / 2) in q's dtype; rotary_dim = 0: none.
  const void* __restrict__ rotary_cos_ptr = nullptr;
  const void* __restrict__ rotary_sin_ptr = nullptr;
  int rotary_dim = 0;
  int seqlen_ro = 0;
  bool rotary_interleaved = true;  // GPT-J pairs (2i, 2i+1); false: GPT-NeoX halves (i, i + rotary_dim/2)
  bool rotary_per_token = false;   // query token t at position cache_seqlens[b] + t (causal/local); else + 0
  const void* __restrict__ q_in_ptr = nullptr;
  int64_t q_in_batch_stride = 0, q_in_row_stride = 0, q_in_head_stride = 0;

  int num_splits = 1;
  float* __restrict__ oaccum_ptr = nullptr;
  float* __restrict__ lse_accum_ptr = nullptr;
  // Set by the dispatch (run_kvcache), not the caller: launch the combine with programmatic
  // dependent launch (the device has it: compute capability 9.0+).
  bool overlap_combine = false;
  // Set by the dispatch too: launch the decode kernel itself with programmatic dependent launch, so
  // its thread blocks start while the previous grid of the stream drains (the previous call's
  // combine, an append, the caller's kernels) and wait in griddep_wait() before their first read.
  // On where overlap_combine is, unless FLASH_ATTN_CUDA_DECODE_PDL=0 (read per call).
  bool overlap_decode = false;
  // Set by the dispatch too (overlap_decode only, else 0): the decode grid's first wave, SMs x blocks
  // per SM. Blocks with a linear index below it prefetch their first K/V blocks into L2 while they
  // wait for the previous grid (decode_kernel.h); a later wave starts after that grid has ended.
  int prefetch_blocks = 0;
};

// Backward: the forward's fields (q, k, v, out = o_ptr, lse and their strides) plus the
// gradients, and float32 scratch the caller allocates, with rows padded to seqlen_q_rounded =
// bwd_rows_rounded(seqlen_q) so the kernels index them without bounds checks:
//   dq_accum: (num_dq_splits, batch, nheads, seqlen_q_rounded, headdim_rounded), zeroed by the
//             launch (sm90 store-first kernels, sm90/bwd_api.h: each tile stored into before it is added to;
//             num_dq_splits from bwd_dq_accum_splits()); each kBlockM-row tile in the main
//             kernel's order (sm80: thread-major, bwd_kernel.h dq_accum_tile; sm90: row-major)
//   delta:    (batch, nheads, seqlen_q_rounded) = rowsum(dO * O), written by the pre-pass
//   lse_log2: (batch, nheads, seqlen_q_rounded) = LSE * log2(e), written by the pre-pass; +inf on
//             padding rows and rows that see no key, so their P is exactly 0
// With GQA the kernel writes dk/dv per *query* head (batch, seqlen_k, nheads, headdim); the
// caller sums each group.
//
// Varlen (cu_seqlens_q set): dq/dk/dv/dout packed like q/k (batch strides 0), and the scratch
// rows of each head hold every sequence padded on its own: sequence b starts at row
// bwd_varlen_scratch_start(cu_seqlens_q[b], b) (below: a multiple of kBwdRowAlign), so
//   dq_accum: (num_dq_splits, nheads, varlen_scratch_rows, headdim_rounded)
//   delta, lse_log2: (nheads, varlen_scratch_rows)
// with varlen_scratch_rows = bwd_varlen_scratch_rows(total_q, batch) = total_q + kBwdRowAlign * batch.
// seqlen_q_rounded = bwd_rows_rounded(max seqlen_q) still sizes the pre-pass/convert grids.
// Query rows per dq_semaphore_ptr entry (the smallest kBlockM of the sm90 backward's tiles; a
// 128-row tile uses every other entry).
constexpr int kBwdSemaphoreRows = 64;
// Rows of the backward's scratch buffers are padded to a multiple of this (every backward
// kBlockM divides it; BwdTraits asserts so).
constexpr int kBwdRowAlign = 128;

// Varlen scratch: sequence b (first packed row cu_q) starts at the multiple of kBwdRowAlign at or
// below cu_q + kBwdRowAlign * b. Consecutive starts differ by at least its length rounded up to
// kBwdRowAlign, so padded sequences never overlap, and all fit in total_q + kBwdRowAlign * batch rows.
constexpr int64_t bwd_varlen_scratch_start(int cu_q, int b) {
  return (int64_t(cu_q) + int64_t(kBwdRowAlign) * b) / kBwdRowAlign * kBwdRowAlign;
}
constexpr int64_t bwd_varlen_scratch_rows(int total_q, int batch) {
  return int64_t(total_q) + int64_t(kBwdRowAlign) * batch;
}

struct BwdParams : FwdParams {
  const void* __restrict__ do_ptr = nullptr;
  void* __restrict__ dq_ptr = nullptr;
  void* __restrict__ dk_ptr = nullptr;
  void* __restrict__ dv_ptr = nullptr;
  float* __restrict__ dq_accum_ptr = nullptr;
  float* __restrict__ delta_ptr = nullptr;
  float* __restrict__ lse_log2_ptr = nullptr;
  int seqlen_q_rounded = 0;
  int64_t varlen_scratch_rows = 0;  // varlen only: scratch rows per head (see above)

  int64_t do_batch_stride = 0, do_row_stride = 0, do_head_stride = 0;
  int64_t dq_batch_stride = 0, dq_row_stride = 0, dq_head_stride = 0;
  int64_t dk_batch_stride = 0, dk_row_stride = 0, dk_head_stride = 0;
  int64_t dv_batch_stride = 0, dv_row_stride = 0, dv_head_stride = 0;

  // dQ accumulation. deterministic = false: every K/V block adds into one slice with float32
  // atomics (run-to-run order varies). deterministic = true: on the sm80 kernels num_dq_splits
  // thread blocks per (head, batch) each walk a fixed list of K/V blocks and own one slice, so every
  // address sees its adds in program order; the slices are then summed in index order. On the sm90
  // kernels (one slice) the K/V blocks add each dQ tile in K/V block order, taking turns on
  // dq_semaphore_ptr: (batch, nheads, seqlen_q_rounded / kBwdSemaphoreRows) int32, zeroed by the
  // pre-pass, sized and needed per bwd_dq_semaphores() (null: none).
  bool deterministic = false;
  int num_dq_splits = 1;
  int* __restrict__ dq_semaphore_ptr = nullptr;

};

}  // namespace flash
