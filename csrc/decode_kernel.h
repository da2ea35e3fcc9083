// KV-cache attention (decode / speculative decode / chunked prefill over a cache), FA2 math with
// the tiling of decode_traits.h. Grid (packed Q tile, split, batch * nheads_k):
//   - GQA packing: the tile's 16 rows are (token, query head) pairs of one K/V head's group, so
//     each K/V tile is read once per group (params.h, KvCacheParams).
//   - Split-KV: split s of the tile's visible key blocks; its normalised O and LSE go to float32
//     partials that splitkv_combine_kernel merges (num_splits == 1 writes out / lse directly).
//   - Paged or contiguous cache (two instantiations, kPaged), rows addressed one by one (any page
//     size), ragged lengths read on the device (CUDA-graph safe: nothing about them comes from the
//     host). Paged: block_table entries travel in the cp.async stream, a few blocks ahead.
#pragma once

#include <cute/tensor.hpp>

#include "decode_traits.h"
#include "grid_dependency.h"
#include "mask.h"
#include "params.h"
#include "score_mods.h"
#include "softmax.h"
#include "tensor_utils.h"

namespace flash {

using namespace cute;

// A read of a sequence index array (cache_seqlens, cache_leftpad, cache_batch_idx, block_table):
// plain, or kL2: through L2 only (ld.global.cg). The decode kernel's guess before griddep_wait reads
// with kL2, so no line it leaves in L1 can be what the reads after the wait see.
template <bool kL2>
CUTE_DEVICE int load_index(const int* ptr) {
  if constexpr (kL2) {
    return __ldcg(ptr);
  } else {
    return *ptr;
  }
}

// Where sequence b's keys live: cache slots [leftpad, leftpad + seqlen_k), clamped into the cache.
// kL2 (a bool_constant argument): the index arrays read through L2 only (load_index).
struct KvCacheSeq {
  int seqlen_k;          // keys this sequence attends to (after the append)
  int leftpad;           // first valid slot
  int cache_row;         // contiguous cache: the row of this batch element
  const int* pages;      // paged cache: this sequence's block_table row; null: contiguous

  template <bool kL2 = false>
  CUTE_DEVICE KvCacheSeq(KvCacheParams const& p, int b, cute::bool_constant<kL2> = {}) {
    const int capacity = p.seqlen_k;
    leftpad = p.cache_leftpad != nullptr ? min(max(load_index<kL2>(p.cache_leftpad + b), 0), capacity) : 0;
    const int64_t end =
        p.cache_seqlens != nullptr ? int64_t(load_index<kL2>(p.cache_seqlens + b)) + p.seqlen_new : capacity;
    seqlen_k = int(min(max(end, int64_t(leftpad)), int64_t(capacity))) - leftpad;
    cache_row = min(max(p.cache_batch_idx != nullptr ? load_index<kL2>(p.cache_batch_idx + b) : b, 0), p.num_pages - 1);
    pages = p.block_table != nullptr ? p.block_table + b * p.block_table_batch_stride : nullptr;
  }

  // The page (paged) or cache row (contiguous) holding slot a (0 <= a < capacity): a memory read
  // when paged, which the decode kernel issues a block ahead of its use.
  template <bool kL2 = false>
  CUTE_DEVICE int page_of(KvCacheParams const& p, int a) const {
    if (pages == nullptr) { return cache_row; }
    return min(max(load_index<kL2>(pages + page_index(p, a)), 0), p.num_pages - 1);
  }
  // Element offset of slot a in page (from page_of) of a cache with these batch (or page) and row strides.
  CUTE_DEVICE int64_t slot_offset(KvCacheParams const& p, int page, int a, int64_t batch_stride,
                                  int64_t row_stride) const {
    const int row = pages != nullptr ? row_in_page(p, a) : a;
    return page * batch_stride + int64_t(row) * row_stride;
  }
  CUTE_DEVICE int64_t slot_offset(KvCacheParams const& p, int a, int64_t batch_stride, int64_t row_stride) const {
    return slot_offset(p, page_of(p, a), a, batch_stride, row_stride);
  }
  // Paged: index into this sequence's block_table row of the page holding slot a (< max_pages
  // when a < capacity = max_pages * page_size).
  CUTE_DEVICE int page_index(KvCacheParams const& p, int a) const {
    return p.page_shift >= 0 ? a >> p.page_shift : a / p.page_size;
  }
  // Paged: row of slot a inside its page.
  CUTE_DEVICE int row_in_page(KvCacheParams const& p, int a) const {
    return p.page_shift >= 0 ? a & (p.page_size - 1) : a % p.page_size;
  }
};

// Split `split` of num_splits: its share [n_begin, n_end) of the K/V blocks that the packed rows
// row0 .. row0 + tile_rows - 1 (tokens row / group) see in a sequence of seq_k keys.
template <int kBlockM, int kBlockN>
struct DecodeSplitBlocks {
  VisibleKeys vk;
  int token_first, token_last, n_begin, n_end;

  CUTE_DEVICE DecodeSplitBlocks(KvCacheParams const& p, int seq_k, int row0, int tile_rows, int group, int split)
      : vk(p.seqlen_q, seq_k, p.window_left, p.window_right),
        token_first(row0 / group),
        token_last((row0 + tile_rows - 1) / group) {
    const KvBlockRange<kBlockM, kBlockN> visible(vk, token_first, token_last);
    const int per_split = (max(visible.n_max - visible.n_min, 0) + p.num_splits - 1) / p.num_splits;
    n_begin = visible.n_min + split * per_split;
    n_end = min(visible.n_max, n_begin + per_split);
  }
};

// L2 prefetch of K/V rows key0 .. key0 + rows - 1 of head head_k: a thread per row (its page read
// once), one prefetch.global.L2 per 128-B line of its K and its V row (per thread, no waterfall; the
// bulk prefetch takes its address from a uniform register, i.e. one lane at a time), from the row's
// start rounded down to a line; a row whose bytes are not a multiple of 128 gets one line more,
// skipped where it lies past the row. sm_90 only (the caller's window is a programmatic dependent
// launch's wait). seq (built with kL2) is clamped and its pages are read through L2 and clamped
// (KvCacheSeq), so every address lies inside the cache even when they come from memory another
// grid is still writing; rows past seq.seqlen_k are skipped.
template <typename Element>
CUTE_DEVICE void prefetch_kv_rows_l2(KvCacheParams const& p, KvCacheSeq const& seq, int head_k, int key0, int rows) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const int bytes = p.headdim * int(sizeof(Element));
  const int lines = (bytes + 127) / 128 + (bytes % 128 != 0);  // per row
  auto prefetch_row = [&](const void* base, int64_t off) {
    const uintptr_t row = reinterpret_cast<uintptr_t>(static_cast<const Element*>(base) + off);
    for (int line = 0; line < lines; ++line) {
      const uintptr_t addr = (row & ~uintptr_t(127)) + uintptr_t(line) * 128;
      if (addr < row + bytes) { asm volatile("prefetch.global.L2 [%0];" ::"l"(addr)); }
    }
  };
  for (int r = threadIdx.x; r < rows && key0 + r < seq.seqlen_k; r += blockDim.x) {
    const int slot = seq.leftpad + key0 + r, page = seq.page_of<true>(p, slot);
    prefetch_row(p.k_ptr, seq.slot_offset(p, page, slot, p.k_batch_stride, p.k_row_stride) + head_k * p.k_head_stride);
    prefetch_row(p.v_ptr, seq.slot_offset(p, page, slot, p.v_batch_stride, p.v_row_stride) + head_k * p.v_head_stride);
  }
#endif
}

// L2 prefetch size of the K/V cp.asyncs (PTX .L2::64B / 128B / 256B; 0: no hint, which ptxas 13.0
// compiles as 128). 128 is CUTLASS's SM80_CP_ASYNC_CACHEGLOBAL_ZFILL. H200, GQA 32/8 d = 128 bf16, same
// run as cuDNN (benchmarks/results/history/h200_l2_*_decode.md), us 128 / 256 / 64: 1 x 32k 37.4 / 39.3 /
// 37.4, 8 x 32k 242.7 / 262.8 / 242.8, 64 x 4k 238.8 / 258.2 / 238.7: 256 B is 5-8 % slower, 64 B equal.
#ifndef FLASH_ATTN_CUDA_DECODE_L2_PREFETCH
#define FLASH_ATTN_CUDA_DECODE_L2_PREFETCH 128
#endif

// 16-byte cp.async global -> shared (L1 bypassed); pred == false writes zeros and reads nothing.
CUTE_DEVICE void cp_async_16(void* smem, const void* gmem, bool pred) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const uint32_t dst = cast_smem_ptr_to_uint(smem);
  const int src_size = pred ? 16 : 0;
#if FLASH_ATTN_CUDA_DECODE_L2_PREFETCH == 256
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(src_size));
#elif FLASH_ATTN_CUDA_DECODE_L2_PREFETCH == 128
  asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(src_size));
#elif FLASH_ATTN_CUDA_DECODE_L2_PREFETCH == 64
  asm volatile("cp.async.cg.shared.global.L2::64B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(src_size));
#elif FLASH_ATTN_CUDA_DECODE_L2_PREFETCH == 0
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(src_size));
#else
#error "FLASH_ATTN_CUDA_DECODE_L2_PREFETCH: 0, 64, 128 or 256"
#endif
#endif
}
// 4-byte cp.async (through L1: the block_table entries of one page are read by many rows).
CUTE_DEVICE void cp_async_4(int* smem, const int* gmem, bool pred) {
  SM80_CP_ASYNC_CACHEALWAYS_ZFILL<uint32_t>::copy(*reinterpret_cast<const uint32_t*>(gmem),
                                                  *reinterpret_cast<uint32_t*>(smem), pred);
}

// S(r, c) -= slope(head of row r) * |token(r) + shift - key(c)|, ALiBi on packed rows: each row
// has its own query head. acc_s, coords: rowcol views of this warp's S tile and its identity.
template <class Acc, class Coords>
CUTE_DEVICE void apply_alibi_packed(Acc& acc_s, Coords const& coords, KvCacheParams const& p, int batch,
                                    int head_k, int row0, int group, int col0, int shift) {
  CUTE_UNROLL
  for (int r = 0; r < size<0>(acc_s); ++r) {
    const int row = row0 + get<0>(coords(r, 0));
    const float slope = alibi_slope_units(p, batch, head_k * group + row % group);
    CUTE_UNROLL
    for (int c = 0; c < size<1>(acc_s); ++c) {
      acc_s(r, c) -= slope * float(abs(row / group + shift - (col0 + get<1>(coords(r, c)))));
    }
  }
}

// kPaged: params.block_table != nullptr (a paged cache); else contiguous, no page code at all.
template <typename Traits, bool kPaged>
__global__ void __launch_bounds__(Traits::kNThreads) decode_kernel(__grid_constant__ const KvCacheParams params) {
  using Element = typename Traits::Element;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kBlockN = Traits::kBlockN;
  constexpr int kHeadDim = Traits::kHeadDim;
  constexpr int kStages = Traits::kStages;
  constexpr int kNWarps = Traits::kNWarps;
  constexpr int kWarpKeys = Traits::kWarpKeys;
  constexpr int kChunks = kHeadDim / 8;  // 16-B chunks per row
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int m_block = blockIdx.x, split = blockIdx.y;
  const int batch = blockIdx.z / params.nheads_k, head_k = blockIdx.z % params.nheads_k;
  const int group = params.nheads / params.nheads_k;
  const int row0 = m_block * kBlockM;                                   // first packed row of the tile
  const int tile_rows = min(kBlockM, params.seqlen_q * group - row0);  // rows that exist
  // The split-KV combine (launched after this grid with programmatic dependent launch) may start
  // its thread blocks once every block of this grid runs; it waits for this grid's end itself.
  griddep_launch_dependents();
  // Launched with programmatic dependent launch itself (params.overlap_decode), this block may run
  // before the previous grid of the stream ends (in a generate loop: the previous call's combine,
  // this call's append). Until then only a guess: the first kStages - 1 K/V blocks of this split
  // by the lengths (and pages) as they read now, prefetched into L2 by the first wave's blocks
  // (params.prefetch_blocks; a later wave starts after that grid). A stale length or page only
  // prefetches other rows of the cache (clamped, KvCacheSeq), and L2 is where every grid's writes
  // land, so a prefetched line that the previous grid then writes is read fresh.
  const int linear_block = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
  if (linear_block < params.prefetch_blocks) {
    const KvCacheSeq guess(params, batch, cute::true_type{});  // index arrays through L2 only
    const DecodeSplitBlocks<kBlockM, kBlockN> blocks(params, guess.seqlen_k, row0, tile_rows, group, split);
    const int rows = min(blocks.n_end - blocks.n_begin, kStages - 1) * kBlockN;
    if (rows > 0) { prefetch_kv_rows_l2<Element>(params, guess, head_k, blocks.n_begin * kBlockN, rows); }
  }
  // Nothing is read for use before the previous grid's writes (cache_seqlens, the appended K/V, q,
  // a reused partials buffer) are complete and visible.
  griddep_wait();

  const KvCacheSeq seq(params, batch);
  // This split's share of the visible K/V blocks (of this sequence's real length).
  const DecodeSplitBlocks<kBlockM, kBlockN> blocks(params, seq.seqlen_k, row0, tile_rows, group, split);
  const VisibleKeys& vk = blocks.vk;
  const int token_first = blocks.token_first, token_last = blocks.token_last;
  const int n_begin = blocks.n_begin, n_end = blocks.n_end;

  // ---------------------------------------------------------------- SHARED MEMORY
  extern __shared__ __align__(128) char smem[];
  Element* q_smem = reinterpret_cast<Element*>(smem);                                    // (kBlockM, d)
  char* stage_smem = smem + Traits::kSmemQElems * sizeof(Element);                      // kStages x (K, V)
  float* stats = reinterpret_cast<float*>(stage_smem + kStages * Traits::kStageBytes);  // (2 warps + 1, kBlockM)
  int* page_ring = reinterpret_cast<int*>(stats + (2 * kNWarps + 1) * kBlockM);           // (kPageSlots, kBlockN)
  auto k_smem = [&](int stage) { return reinterpret_cast<Element*>(stage_smem + stage * Traits::kStageBytes); };
  auto v_smem = [&](int stage) { return k_smem(stage) + Traits::kSmemKVElems; };

  // ---------------------------------------------------------------- OUTPUT (this split's rows)
  // value(r, c), lse_of(r): tile row r, column c. num_splits == 1: out and lse; else the partials.
  auto store = [&](auto value, auto lse_of) {
    for (int i = tid; i < tile_rows * kChunks; i += Traits::kNThreads) {
      const int r = i / kChunks, c = (i % kChunks) * 8;
      if (c >= params.headdim) { continue; }
      const int token = (row0 + r) / group, head = head_k * group + (row0 + r) % group;
      float v[8];
      CUTE_UNROLL
      for (int j = 0; j < 8; ++j) { v[j] = value(r, c + j); }
      if (params.num_splits == 1) {
        Element* o = static_cast<Element*>(params.o_ptr) + batch * params.o_batch_stride +
                     token * params.o_row_stride + head * params.o_head_stride + c;
        cutlass::Array<Element, 8> packed;
        CUTE_UNROLL
        for (int j = 0; j < 8; ++j) { packed[j] = Element(v[j]); }
        *reinterpret_cast<cutlass::Array<Element, 8>*>(o) = packed;
      } else {
        const int64_t row = ((int64_t(split) * params.batch + batch) * params.nheads + head) * params.seqlen_q + token;
        float4* o = reinterpret_cast<float4*>(params.oaccum_ptr + row * params.headdim_rounded + c);
        o[0] = make_float4(v[0], v[1], v[2], v[3]);
        o[1] = make_float4(v[4], v[5], v[6], v[7]);
      }
    }
    for (int r = tid; r < tile_rows; r += Traits::kNThreads) {
      const int token = (row0 + r) / group, head = head_k * group + (row0 + r) % group;
      const int64_t row = (int64_t(batch) * params.nheads + head) * params.seqlen_q + token;
      if (params.num_splits == 1) {
        params.lse_ptr[row] = lse_of(r);
      } else {
        params.lse_accum_ptr[int64_t(split) * params.batch * params.nheads * params.seqlen_q + row] = lse_of(r);
      }
    }
  };
  if (n_begin >= n_end) {  // no visible key in this split: O = 0, LSE = -inf
    store([](int, int) { return 0.f; }, [](int) { return -INFINITY; });
    return;
  }

  // ---------------------------------------------------------------- GLOBAL -> SHARED
  // Q: packed row r is token (row0 + r) / group of query head head_k * group + (row0 + r) % group.
  auto load_q = [&]() {
    Tensor sQ = make_tensor(make_smem_ptr(q_smem), typename Traits::SmemLayoutQ{});  // (kBlockM, d)
    for (int i = tid; i < kBlockM * kChunks; i += Traits::kNThreads) {
      const int r = i / kChunks, c = (i % kChunks) * 8;
      const bool ok = r < tile_rows && c < params.headdim;
      const int token = (row0 + r) / group, head = head_k * group + (row0 + r) % group;
      const int64_t off = ok ? batch * params.q_batch_stride + token * params.q_row_stride +
                                   head * params.q_head_stride + c : 0;
      cp_async_16(&sQ(r, c), static_cast<const Element*>(params.q_ptr) + off, ok);
    }
  };
  // K/V block n into a stage: rows past the sequence (and columns past d) are zeros. Thread tid
  // copies the 16-B chunks tid + it * kNThreads (row-major over (kBlockN, kChunks)): rows
  // chunk_row(it), always the same column when kChunks divides kNThreads (d = 32/64/128/256: computed
  // once), else column chunk_col(it) (d = 96/160/192/224: 12-28 chunks per row).
  constexpr int kKvIters = kBlockN * kChunks / Traits::kNThreads;  // chunks per thread per K/V block
  constexpr bool kFixedCol = Traits::kNThreads % kChunks == 0;
  static_assert(kBlockN * kChunks % Traits::kNThreads == 0, "whole chunks per thread per K/V block");
  auto chunk_row = [&](int it) { return (tid + it * Traits::kNThreads) / kChunks; };
  const int col0 = tid % kChunks * 8;  // with kFixedCol: this thread's column of every K/V row it copies
  const int64_t k_col0 = head_k * params.k_head_stride + col0, v_col0 = head_k * params.v_head_stride + col0;
  auto chunk_col = [&](int it) {
    if constexpr (kFixedCol) { return col0; } else { return (tid + it * Traits::kNThreads) % kChunks * 8; }
  };
  auto k_col_of = [&](int it) -> int64_t {
    if constexpr (kFixedCol) { return k_col0; } else { return head_k * params.k_head_stride + chunk_col(it); }
  };
  auto v_col_of = [&](int it) -> int64_t {
    if constexpr (kFixedCol) { return v_col0; } else { return head_k * params.v_head_stride + chunk_col(it); }
  };
  // Paged: the page of each key row of block n, as written in block_table (clamped where used),
  // lands in page_ring slot (n - n_begin) % kPageSlots through 4-B cp.asyncs issued in the commit
  // group kStages - 1 groups before the one that copies block n's K/V: the wait that releases a
  // stage also releases the pages of the block about to be copied into it, so no block_table read
  // waits (in a register scoreboard) behind the K/V stream. Rows past the sequence read no entry.
  constexpr int kPageSlots = Traits::kPageSlots;
  static_assert(kBlockN <= Traits::kNThreads, "one block_table entry per thread and block");
  auto fetch_pages = [&](int n) {
    if constexpr (kPaged) {
      if (n >= n_end || tid >= kBlockN) { return; }
      const int key = n * kBlockN + tid;
      const bool ok = key < seq.seqlen_k;
      const int index = ok ? seq.page_index(params, seq.leftpad + key) : 0;
      cp_async_4(page_ring + (n - n_begin) % kPageSlots * kBlockN + tid, seq.pages + index, ok);
    }
  };
  // Paged: no branch per chunk (a row past the sequence reads its zero-filled entry, page 0, and
  // copies nothing); the row inside the page by mask (kPow2, a uniform branch per block picks it)
  // or by division (page sizes that are not powers of two). One lookup per 16-row group of a thread's rows,
  // or per block, instead of one per row was tried and removed: paged16 6-13 % slower at batch 1 / 8, up to
  // 23 % with the wide tile (H100, benchmarks/NOTES.md "Twenty-fourth session", DECODE_PAGE_PAIRS).
  auto load_kv_paged = [&](int n, int stage, auto pow2) {
    constexpr bool kPow2 = decltype(pow2)::value;
    Tensor sK = make_tensor(make_smem_ptr(k_smem(stage)), typename Traits::SmemLayoutKV{});  // (kBlockN, d)
    Tensor sV = make_tensor(make_smem_ptr(v_smem(stage)), typename Traits::SmemLayoutKV{});  // (kBlockN, d)
    const int* pages = page_ring + (n - n_begin) % kPageSlots * kBlockN;  // (kBlockN,) of block n
    CUTE_UNROLL
    for (int it = 0; it < kKvIters; ++it) {
      const int r = chunk_row(it), col = chunk_col(it), key = n * kBlockN + r, slot = seq.leftpad + key;
      const bool ok = key < seq.seqlen_k && col < params.headdim;
      const int page = min(max(pages[r], 0), params.num_pages - 1);  // a bad block_table reads a wrong page, never outside
      const int row = kPow2 ? slot & (params.page_size - 1) : slot % params.page_size;
      const int64_t k_off = page * params.k_batch_stride + int64_t(row) * params.k_row_stride + k_col_of(it);
      const int64_t v_off = page * params.v_batch_stride + int64_t(row) * params.v_row_stride + v_col_of(it);
      cp_async_16(&sK(r, col), static_cast<const Element*>(params.k_ptr) + k_off, ok);
      cp_async_16(&sV(r, col), static_cast<const Element*>(params.v_ptr) + v_off, ok);
    }
  };
  auto load_kv = [&](int n, int stage) {
    if constexpr (kPaged) {
      if (params.page_shift >= 0) {
        load_kv_paged(n, stage, cute::true_type{});
      } else {
        load_kv_paged(n, stage, cute::false_type{});
      }
    } else {
      Tensor sK = make_tensor(make_smem_ptr(k_smem(stage)), typename Traits::SmemLayoutKV{});  // (kBlockN, d)
      Tensor sV = make_tensor(make_smem_ptr(v_smem(stage)), typename Traits::SmemLayoutKV{});  // (kBlockN, d)
      CUTE_UNROLL
      for (int it = 0; it < kKvIters; ++it) {
        const int r = chunk_row(it), col = chunk_col(it), key = n * kBlockN + r;
        const bool ok = key < seq.seqlen_k && col < params.headdim;
        int64_t k_off = 0, v_off = 0;
        if (ok) {
          const int slot = seq.leftpad + key;
          k_off = seq.cache_row * params.k_batch_stride + int64_t(slot) * params.k_row_stride + k_col_of(it);
          v_off = seq.cache_row * params.v_batch_stride + int64_t(slot) * params.v_row_stride + v_col_of(it);
        }
        cp_async_16(&sK(r, col), static_cast<const Element*>(params.k_ptr) + k_off, ok);
        cp_async_16(&sV(r, col), static_cast<const Element*>(params.v_ptr) + v_off, ok);
      }
    }
  };

  // ---------------------------------------------------------------- MMA PARTITIONS (per warp)
  typename Traits::TiledMma tiled_mma;
  auto thr_mma = tiled_mma.get_thread_slice(lane);
  // This warp's keys of a stage: K rows [warp * kWarpKeys, +kWarpKeys), and V^T's columns.
  auto warp_k = [&](int stage) {
    return local_tile(make_tensor(make_smem_ptr(k_smem(stage)), typename Traits::SmemLayoutKV{}),
                      Shape<Int<kWarpKeys>, Int<kHeadDim>>{}, make_coord(warp, 0));    // (kWarpKeys, d)
  };
  auto warp_vt = [&](int stage) {
    return local_tile(make_tensor(make_smem_ptr(v_smem(stage)), typename Traits::SmemLayoutVt{}),
                      Shape<Int<kHeadDim>, Int<kWarpKeys>>{}, make_coord(0, warp));    // (d, kWarpKeys)
  };
  Tensor sQ = make_tensor(make_smem_ptr(q_smem), typename Traits::SmemLayoutQ{});        // (kBlockM, d)
  Tensor tSrQ = thr_mma.partition_fragment_A(sQ);                                        // (MMA, 1, d/16)
  Tensor tSrK = thr_mma.partition_fragment_B(warp_k(0));                                 // (MMA, kWarpKeys/8, d/16)
  Tensor tOrVt = thr_mma.partition_fragment_B(warp_vt(0));                               // (MMA, d/8, kWarpKeys/16)
  Tensor acc_o = partition_fragment_C(tiled_mma, Shape<Int<kBlockM>, Int<kHeadDim>>{});  // (MMA, 1, d/8) fp32
  Tensor acc_o_rc = make_tensor(acc_o.data(), rowcol_view(acc_o.layout()));              // (rows, d)
  clear(acc_o);
  auto smem_copy_Q = make_tiled_copy_A(typename Traits::Fwd::SmemCopyAtom{}, tiled_mma);
  auto smem_copy_K = make_tiled_copy_B(typename Traits::Fwd::SmemCopyAtom{}, tiled_mma);
  auto smem_copy_V = make_tiled_copy_B(typename Traits::Fwd::SmemCopyAtomTransposed{}, tiled_mma);
  auto smem_thr_K = smem_copy_K.get_thread_slice(lane);
  auto smem_thr_V = smem_copy_V.get_thread_slice(lane);
  // Tile-local (row, key-in-warp) of each S element.
  Tensor tScS = thr_mma.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kWarpKeys>>{}));  // (MMA, 1, kWarpKeys/8)
  Tensor tScS_rc = make_tensor(tScS.data(), rowcol_view(tScS.layout()));                         // (rows, kWarpKeys)
  constexpr int kRowsPerThread = decltype(size<0>(acc_o_rc))::value;
  OnlineSoftmax<kRowsPerThread> softmax;

  // A block needs the element mask when it crosses the sequence end or a window edge.
  auto needs_mask = [&](int n) {
    const int first_key = n * kBlockN, last_key = first_key + kBlockN - 1;
    return last_key >= vk.seqlen_k || (vk.window_right >= 0 && last_key > token_first + vk.shift + vk.window_right) ||
           (vk.window_left >= 0 && first_key < token_last + vk.shift - vk.window_left);
  };

  // ---------------------------------------------------------------- PROLOGUE
  if constexpr (kPaged) {  // pages of the first kStages - 1 blocks, waited for here
    CUTE_UNROLL
    for (int s = 0; s < kStages - 1; ++s) { fetch_pages(n_begin + s); }
    cp_async_fence();
    cp_async_wait<0>();
    __syncthreads();
  }
  load_q();  // in the first commit group, with block n_begin
  CUTE_UNROLL
  for (int s = 0; s < kStages - 1; ++s) {
    if (n_begin + s < n_end) { load_kv(n_begin + s, s); }
    fetch_pages(n_begin + s + kStages - 1);  // slots not read before the main loop's first barrier
    cp_async_fence();
  }

  // ---------------------------------------------------------------- MAIN LOOP
  // Block n sits in stage (n - n_begin) % kStages; kStages - 1 blocks are in flight while it is used.
  // Paged: the group of block n + kStages - 1 also carries the pages of block n + 2 * (kStages - 1),
  // into block n's slot (read by load_kv(n), at least one barrier ago).
  CUTE_NO_UNROLL
  for (int n = n_begin; n < n_end; ++n) {
    const int i = n - n_begin, stage = i % kStages;
    cp_async_wait<kStages - 2>();  // block n (and Q; paged: pages of block n + kStages - 1) landed for this thread ...
    __syncthreads();               // ... and every thread; every warp is done with block n - 1's stage
    if (n + kStages - 1 < n_end) { load_kv(n + kStages - 1, (i + kStages - 1) % kStages); }
    fetch_pages(n + 2 * (kStages - 1));
    cp_async_fence();
    if (i == 0) { copy(smem_copy_Q, smem_copy_Q.get_thread_slice(lane).partition_S(sQ),
                       smem_copy_Q.get_thread_slice(lane).retile_D(tSrQ)); }  // Q stays in registers

    Tensor acc_s = partition_fragment_C(tiled_mma, Shape<Int<kBlockM>, Int<kWarpKeys>>{});  // (MMA, 1, kWarpKeys/8)
    Tensor acc_s_rc = make_tensor(acc_s.data(), rowcol_view(acc_s.layout()));               // (rows, kWarpKeys)
    clear(acc_s);
    gemm_rs(acc_s, tSrQ, tSrK, smem_thr_K.partition_S(warp_k(stage)), tiled_mma, smem_copy_K);  // S = Q K^T
    const int key0 = n * kBlockN + warp * kWarpKeys;
    apply_softcap(acc_s, params);
    if (params.alibi_slopes_ptr != nullptr) {
      apply_alibi_packed(acc_s_rc, tScS_rc, params, batch, head_k, row0, group, key0, vk.shift);
    }
    if (needs_mask(n)) { apply_mask(acc_s_rc, tScS_rc, vk, row0, key0, group); }
    // Rows whose running max did not move skip the rescale of O (after the first blocks, most rows:
    // 64 FMULs per thread and block). H200, GQA 32/8 d = 128 bf16, same run as
    // cuDNN (results/history/h200_dtile{1,2}_*): 8 x 4k 37.81 -> 36.91 us (0.97 -> 0.995x cuDNN), 8 x 32k
    // 243.0 -> 241.5, the other shapes within 0.3 %.
    softmax.template update</*kSkipUnitRescale=*/true>(acc_s_rc, acc_o_rc, params.scale_log2);
    Tensor rP = convert_type<Element>(acc_s);                                 // (MMA, 1, kWarpKeys/8)
    Tensor tOrP = make_tensor(rP.data(), acc_as_a_operand(rP.layout()));      // (MMA, 1, kWarpKeys/16)
    gemm_rs(acc_o, tOrP, tOrVt, smem_thr_V.partition_S(warp_vt(stage)), tiled_mma, smem_copy_V);  // O += P V
  }

  // ---------------------------------------------------------------- MERGE THE WARPS
  // Each warp holds (max, sum, O) of its keys for every row; rescale to the common max, sum.
  float* warp_max = stats;                         // (kNWarps, kBlockM)
  float* warp_sum = stats + kNWarps * kBlockM;     // (kNWarps, kBlockM)
  float* row_lse = stats + 2 * kNWarps * kBlockM;  // (kBlockM)
  cp_async_wait<0>();
  CUTE_UNROLL
  for (int r = 0; r < kRowsPerThread; ++r) {
    const float l = quad_sum(softmax.row_sum(r));
    if (lane % 4 == 0) {
      const int row = get<0>(tScS_rc(r, 0));
      warp_max[warp * kBlockM + row] = softmax.row_max(r);
      warp_sum[warp * kBlockM + row] = l;
    }
  }
  __syncthreads();  // stats visible; every warp is past its last read of the stages
  const float unit = score_unit(params);
  CUTE_UNROLL
  for (int r = 0; r < kRowsPerThread; ++r) {
    const int row = get<0>(tScS_rc(r, 0));
    float m = -INFINITY;
    CUTE_UNROLL
    for (int w = 0; w < kNWarps; ++w) { m = fmaxf(m, warp_max[w * kBlockM + row]); }
    float l = 0.f;
    CUTE_UNROLL
    for (int w = 0; w < kNWarps; ++w) {
      const float mw = warp_max[w * kBlockM + row];
      l += mw == -INFINITY ? 0.f : warp_sum[w * kBlockM + row] * exp2f((mw - m) * params.scale_log2);
    }
    const float mine = softmax.row_max(r);
    const float factor = (l == 0.f || mine == -INFINITY) ? 0.f : exp2f((mine - m) * params.scale_log2) / l;
    CUTE_UNROLL
    for (int c = 0; c < size<1>(acc_o_rc); ++c) { acc_o_rc(r, c) *= factor; }
    if (warp == 0 && lane % 4 == 0) { row_lse[row] = l == 0.f ? -INFINITY : m * unit + logf(l); }
  }
  // Partial O of every warp -> shared (the stages are free), then summed per element.
  float* merge = reinterpret_cast<float*>(stage_smem);  // (kNWarps, kBlockM, d)
  Tensor tOcO = thr_mma.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDim>>{}));  // (MMA, 1, d/8)
  CUTE_UNROLL
  for (int e = 0; e < size(acc_o); ++e) {
    merge[(warp * kBlockM + get<0>(tOcO(e))) * kHeadDim + get<1>(tOcO(e))] = acc_o(e);
  }
  __syncthreads();
  store(
      [&](int r, int c) {
        float v = 0.f;
        CUTE_UNROLL
        for (int w = 0; w < kNWarps; ++w) { v += merge[(w * kBlockM + r) * kHeadDim + c]; }
        return v;
      },
      [&](int r) { return row_lse[r]; });
}

}  // namespace flash
