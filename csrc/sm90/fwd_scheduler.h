// Tile order of the persistent sm90 forward (fwd_persistent.h). A tile covers query rows
// [kBlockM m, kBlockM m + kBlockM) of one (batch, head); hb = batch * nheads + head.
//   non-causal: t = hb * num_m + m. CTA b takes tiles b, b + gridDim.x, ... (static round-robin:
//     every tile costs the same). A head's tiles are adjacent, so its K/V stay in L2 while they run.
//     d = 64's tile (fwd_persistent.h kDynamicNonCausal: its last query tile of a sequence is usually
//     short) draws the same order from the counter below. (The causal order's L2 sections with the
//     query blocks ascending, short tiles last, measured 2-3 % slower at 2k / 4k: with one CTA per
//     head at a time instead of ~11 sharing a head's K/V; benchmarks/NOTES.md "Eleventh session".)
//   causal: longest first, handed out dynamically (FA3's dynamic persistent scheduler; our code).
//     The (batch, head) pairs form sections of `section` pairs whose K/V fit in ~32 MB of L2
//     (kL2KVBytes; rounded down to a power of two, times the query heads per KV head, at least 1);
//     inside a section the last query block of every pair comes first, then the one before, ...:
//     t = section_start * num_m + m_rank * pairs_in_section + pair, m = num_m - 1 - m_rank. Every
//     index comes from a global counter (atomicAdd): a CTA's producer takes one at the start and one
//     when it has issued a tile's last load, so the next free SM gets the longest tile left (greedy
//     LPT list scheduling) while the pairs that run together share their K/V in L2.
//     The counter is zeroed on the stream before every launch (fwd_launch.h): no host copy, so a
//     captured CUDA graph replays correctly.
//     The kernel reads the order's sizes from FwdParams::sm90_tiles (constant bank), which the launch
//     fills (fill_tile_order): the drawing producer thread runs on 32-40 registers (fwd_traits.h).
//   Why (tools/sm90_tile_order_model.py, benchmarks/NOTES.md "Persistent forward: causal tiles
//   longest first"): the static round-robin
//   in index order gave CTA b the same query-block positions over and over (132 % num_m == 0 at
//   d = 64 1k: every 6th CTA all longest tiles): measured causal 205 / 267 TFLOP/s at d = 64 1k / 4k,
//   436 at d = 128 16k vs 250 / 405 / 598 for the one-tile kernel. Static orders that keep the L2
//   sections stay 5-25 % off the balanced makespan at d = 128 (the model); the dynamic one is within
//   2 % everywhere.
#pragma once

#include <cute/config.hpp>

#include "../params.h"

namespace flash::sm90 {

// L2 bytes the K/V of one causal section may take (H100/H200: 50 / 60 MB of L2; FA3 takes 32 MB).
constexpr long long kL2KVBytes = 32ll << 20;

// (batch, head) pairs per L2 section of the causal order (Sm90TileOrder::section, set by the launch).
// kv_row_bytes: one key's K + V bytes (2 d sizeof(Element)).
CUTE_HOST_DEVICE int causal_section_pairs(const FwdParams& p, int kv_row_bytes) {
  const int pairs = p.nheads * p.batch;
  const long long head_bytes = (long long)p.seqlen_k * kv_row_bytes;
  const long long fit = head_bytes > 0 ? kL2KVBytes / head_bytes : kL2KVBytes;
  long long pow2 = 1;
  while (2 * pow2 <= fit) { pow2 *= 2; }
  // Query heads sharing a KV head (GQA: adjacent heads) read the same K/V. At most every pair
  // (section * num_m <= num_tiles stays an int), at least one.
  const long long want = pow2 * (p.nheads_k > 0 ? p.nheads / p.nheads_k : 1);
  return want < pairs ? int(want) : (pairs > 0 ? pairs : 1);
}

// kOrderInParams: the sizes come from FwdParams::sm90_tiles (the constant bank, filled by the launch:
// fill_tile_order), not from registers set up here: the kernels whose producer thread may draw tiles
// from the counter (causal; non-causal with fwd_persistent.h kDynamicNonCausal), since its 32-40
// registers hold the drawn tile's coordinates (d = 64 non-causal, nvcc 13.0, measured on a first form
// of its loop: 12 B of spill with num_m and nheads in registers, 8 B with them read from the params).
// kClusterM > 1 (the static non-causal order only): the query tiles of a sequence rounded up to a multiple
// of kClusterM, so that the CTAs b, b + 1 of a cluster (gridDim.x a multiple of kClusterM) always get
// adjacent query tiles of one (batch, head); a tile past seqlen_q has no live row (its warpgroups idle).
template <int kBlockM, bool kCausal, bool kOrderInParams = kCausal, int kClusterM = 1>
struct FwdScheduler {
  static_assert(kOrderInParams || !kCausal, "the causal order's sizes live in FwdParams::sm90_tiles");
  static_assert(kClusterM == 1 || (!kCausal && !kOrderInParams), "clusters: the static non-causal order only");
  int num_m, nheads, num_tiles;

  CUTE_HOST_DEVICE explicit FwdScheduler(const FwdParams& p)
      : num_m((p.seqlen_q + kBlockM * kClusterM - 1) / (kBlockM * kClusterM) * kClusterM), nheads(p.nheads),
        num_tiles(num_m * p.nheads * p.batch) {}

  // The launch's Sm90TileOrder (fill_tile_order), whose fields the kernel reads from the constant bank
  // (kOrderInParams). section: the causal order's only.
  CUTE_HOST_DEVICE static void fill_tile_order(Sm90TileOrder& o, const FwdParams& p, int kv_row_bytes) {
    o.section = causal_section_pairs(p, kv_row_bytes);
    o.num_m = (p.seqlen_q + kBlockM - 1) / kBlockM;
    o.num_pairs = p.nheads * p.batch;
    o.num_tiles = o.num_m * o.num_pairs;
  }

  // Tiles of the launch (kOrderInParams: from p.sm90_tiles, no register held across the loop).
  CUTE_HOST_DEVICE int tiles(const FwdParams& p) const {
    if constexpr (kOrderInParams) {
      return p.sm90_tiles.num_tiles;
    } else {
      return num_tiles;
    }
  }

  // p: the launch's params (kOrderInParams: p.sm90_tiles).
  CUTE_HOST_DEVICE void decode(int t, int& m_block, int& head, int& batch, const FwdParams& p) const {
    int hb, m;
    if constexpr (kCausal) {  // L2 sections, query blocks outer, longest first
      const Sm90TileOrder& o = p.sm90_tiles;
      const int section = o.section, num_pairs = o.num_pairs, num_m = o.num_m;
      const int per_section = section * num_m;
      const int sec = t / per_section, r = t - sec * per_section;
      const int first = sec * section;
      const int pairs = num_pairs - first < section ? num_pairs - first : section;  // last section: the rest
      const int m_rank = r / pairs;
      hb = first + (r - m_rank * pairs);
      m = num_m - 1 - m_rank;
    } else {  // index order
      const int nm = kOrderInParams ? p.sm90_tiles.num_m : num_m;
      hb = t / nm;
      m = t - hb * nm;
    }
    m_block = m;
    const int heads = kOrderInParams ? p.nheads : nheads;  // from the constant bank
    batch = hb / heads;
    head = hb - batch * heads;
  }
};

// CTAs of the persistent launch: persistent_ctas > 0 asks for that many (tests run several tiles
// per CTA on small shapes), < 0 for one per SM; never more than there are tiles.
inline int persistent_grid(int num_tiles, int persistent_ctas, int sms) {
  const int want = persistent_ctas > 0 ? persistent_ctas : sms;
  return want < num_tiles ? want : num_tiles;
}

}  // namespace flash::sm90
