// Host-side check of apply_dropout's walk over a thread's S fragment (csrc/dropout.h DropoutWalk)
// for the forward and backward tiles of every head dim and budget (fwd_tile_config.h,
// bwd_tile_config.h) and the sm90 forward's dropout tiles (sm90/fwd_tile_table.h: one warpgroup's
// 64 x kBlockN wgmma accumulator, viewed by sm90::acc_rowcol as the mainloop does): every element of every thread's fragment is visited exactly once, by a
// Philox call whose counter is the element's own (philox.h dropout_counter), at the byte philox.h
// assigns it (dropout_slot); and the keep test the kernel makes on that byte (dropout_drop_bits, then
// byte_sign_mask: its host form, the PRMT's specification) equals dropout_keep for a few thresholds.
// The sm90 backward's transposed tile (sm90/bwd_dropout.h: keys along the wgmma rows, calls shared
// through a shared-memory word per thread): every thread's generate, then every thread's read and
// drop_mask on its S^T fragment against dropout_keep(query, key); d = 256's role-split tile (one
// warpgroup makes the mask in registers, the other learns it from P^T's sign) also through its sP hand-over
// (check_sm90_bwd_split). No GPU needed:
//   nvcc -std=c++20 --expt-relaxed-constexpr -Icsrc -I$(python third_party/find_cutlass.py) \
//        tools/dropout_layout_check.cu -o build/dropout_layout_check && build/dropout_layout_check
#include <cstdio>
#include <cute/tensor.hpp>
#include "bwd_tile_config.h"
#include "fwd_tile_config.h"
#include "kernel_traits.h"
#include "bwd_kernel_traits.h"
#include "tensor_utils.h"
#include "dropout.h"
#include "sm90/fwd_layouts.h"
#include "sm90/fwd_tile_table.h"
#include "sm90/bwd_dropout.h"
#include "sm90/bwd_tile_table.h"
using namespace cute;

bool same(const flash::PhiloxCounter& a, const flash::PhiloxCounter& b) {
  return a.x == b.x && a.y == b.y && a.z == b.z && a.w == b.w;
}

// kWgmma: the TiledMma is an sm90 warpgroup MMA, its accumulator viewed with sm90::acc_rowcol.
template <class TiledMma, int kBlockM, int kBlockN, int kWarpsN, bool kWgmma = false>
int check(const char* name, int nthreads) {
  using Walk = flash::DropoutWalk<kWarpsN>;
  constexpr uint32_t kThresholds[3] = {1, 230, 256};
  int bad = 0, total = 0, calls = 0;
  // tiles at a few positions of the sequence (row0, col0), rng with a carry into the high base word
  const int tile_rows[2] = {0, 3 * kBlockM}, tile_cols[2] = {0, 5 * kBlockN};
  for (int tid = 0; tid < nthreads; ++tid) {
    TiledMma mma;
    auto thr = mma.get_thread_slice(tid);
    Tensor c = thr.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kBlockN>>{}));
    auto rc_layout = [&] {
      if constexpr (kWgmma) { return flash::sm90::acc_rowcol(c.layout()); } else { return flash::rowcol_view(c.layout()); }
    };
    Tensor rc = make_tensor(c.data(), rc_layout());
    constexpr int kRows = decltype(size<0>(rc))::value;
    constexpr int kCols = decltype(size<1>(rc))::value;
    constexpr int kAtomsN = kCols / 2;
    static_assert(kAtomsN % Walk::kAtoms64 == 0, "whole 64-column blocks per thread");
    int visits[kRows][kCols] = {};
    for (int t = 0; t < 4; ++t) {
      const int row0 = tile_rows[t % 2], col0 = tile_cols[t / 2];
      const flash::DropoutRng rng{0x9E3779B9u + uint32_t(t), 0x12345u, (uint64_t(1) << 32) - 1 + uint64_t(t),
                                  kThresholds[t % 3]};
      const flash::DropoutBytes bytes = flash::dropout_bytes(rng.threshold);
      // as apply_dropout: the first element's counter, the others' by DropoutWalk::counter
      const int first_row = get<0>(rc(0, 0)), first_col = col0 + get<1>(rc(0, 0));
      const flash::PhiloxCounter first = flash::dropout_counter(rng, row0 + first_row, first_col);
      for (int m = 0; m < kRows / 2; ++m)
        for (int block = 0; block < kAtomsN / Walk::kAtoms64; ++block)
          for (int call = 0; call < Walk::kCalls; ++call) {
            const flash::PhiloxCounter counter = Walk::counter(first, get<0>(rc(2 * m, 0)) - first_row, block, call);
            const flash::PhiloxCounter r = flash::philox4x32_10(counter, rng.key0, rng.key1);
            uint32_t drop[4] = {r.x, r.y, r.z, r.w};
            for (int w = 0; w < 4; ++w) { drop[w] = flash::dropout_drop_bits(drop[w], bytes); }
            ++calls;
            for (int i = 0; i < Walk::kAtomsPerCall; ++i)
              for (int half = 0; half < 2; ++half)
                for (int column = 0; column < 2; ++column) {
                  const int n = block * Walk::kAtoms64 + Walk::atom(call, i);
                  const int er = row0 + get<0>(rc(2 * m + half, 2 * n + column));
                  const int ec = col0 + get<1>(rc(2 * m + half, 2 * n + column));
                  const int slot = flash::dropout_slot(er, ec);
                  const int word = Walk::word(half, i), byte = Walk::byte(i, column);
                  const bool kept = flash::byte_sign_mask(drop[word], byte) == 0;
                  ++total;
                  if (t == 0) { ++visits[2 * m + half][2 * n + column]; }
                  const bool ok = same(flash::dropout_counter(rng, er, ec), counter) && slot / 4 == word &&
                                  slot % 4 == byte && kept == flash::dropout_keep(rng, er, ec);
                  if (!ok && bad++ < 5) {
                    std::printf("%s: tid %d m %d n %d half %d column %d: (%d,%d) slot %d, walk word %d byte %d\n",
                                name, tid, m, n, half, column, er, ec, slot, word, byte);
                  }
                }
          }
    }
    for (int i = 0; i < kRows; ++i)
      for (int j = 0; j < kCols; ++j)
        if (visits[i][j] != 1 && bad++ < 5) { std::printf("%s: tid %d element (%d,%d) visited %d times\n", name, tid, i, j, visits[i][j]); }
  }
  std::printf("%s: %d elements checked in %d Philox calls (%.1f used bytes per call), %d bad\n", name, total, calls,
              double(total) / calls, bad);
  return bad;
}

// The 4-bytes-at-once keep test (dropout.h dropout_drop_bits) against byte < t, exhaustively: every
// threshold t in [1, 256], byte value, byte position and a few neighbour patterns (no borrow may leak).
int check_bytes() {
  const uint32_t neighbours[5] = {0x00000000u, 0xFFFFFFFFu, 0x80808080u, 0x7F7F7F7Fu, 0x3C9A0EF1u};
  int bad = 0, total = 0;
  for (uint32_t t = 1; t <= 256; ++t) {
    const flash::DropoutBytes b = flash::dropout_bytes(t);
    for (uint32_t x = 0; x < 256; ++x)
      for (int j = 0; j < 4; ++j)
        for (uint32_t other : neighbours) {
          const uint32_t word = (other & ~(0xFFu << (8 * j))) | (x << (8 * j));
          const bool dropped = flash::byte_sign_mask(flash::dropout_drop_bits(word, b), j) != 0;
          ++total;
          if (dropped != (x >= t) && bad++ < 5) { std::printf("bytes: t %u word %08x byte %d\n", t, word, j); }
        }
  }
  std::printf("byte test: %d cases, %d bad\n", total, bad);
  return bad;
}

// Every budget row's tiles (smem_budget.h); backward tiles narrower than 64 keys have no dropout
// kernel (params.h dropout_tile) and are skipped.
template <int D, int KB>
int check_head_dim() {
  using E = cutlass::bfloat16_t;
  using Cfg = flash::FwdTileConfig<D, KB>;
  using F = flash::FwdTraitsFor<D, KB, E>;
  using B = flash::BwdDropoutTraitsFor<D, E, KB>;  // the dropout kernel's S/dP warps
  char fwd_name[64], bwd_name[64];
  std::snprintf(fwd_name, sizeof(fwd_name), "fwd d=%d %d KB %dx%d", D, KB, Cfg::kBlockM, Cfg::kBlockN);
  std::snprintf(bwd_name, sizeof(bwd_name), "bwd d=%d %d KB %dx%d W_N=%d", D, KB, B::kBlockM, B::kBlockN, B::kWarpsNSdP);
  int bad = check<typename F::TiledMma, Cfg::kBlockM, Cfg::kBlockN, 1>(fwd_name, F::kNThreads);
  if constexpr (flash::dropout_tile(B::kBlockN)) {
    bad += check<typename B::TiledMmaSdP, B::kBlockM, B::kBlockN, B::kWarpsNSdP>(bwd_name, B::kNThreads);
  } else {
    std::printf("%s: no dropout kernel (narrower than 64 keys)\n", bwd_name);
  }
  return bad;
}

template <int KB>
int check_budget() {
  return check_head_dim<32, KB>() + check_head_dim<64, KB>() + check_head_dim<96, KB>() + check_head_dim<128, KB>() +
         check_head_dim<160, KB>() + check_head_dim<192, KB>() + check_head_dim<224, KB>() + check_head_dim<256, KB>();
}

// The sm90 forward's dropout variant: each consumer warpgroup (128 threads) owns 64 rows.
template <int D>
int check_sm90() {
  using F = flash::sm90::FwdTraitsFor<cutlass::bfloat16_t, D, true>;
  char name[64];
  std::snprintf(name, sizeof(name), "sm90 fwd dropout d=%d 64x%d (per warpgroup)", D, F::kBlockN);
  return check<typename F::MmaQK, F::kWGRows, F::kBlockN, 1, true>(name, 128);
}

// The sm90 backward (sm90/bwd_dropout.h): one consumer warpgroup's 64 keys x kBlockM = 64 queries,
// S^T as the mainloop views it (MmaSdP's accumulator through sm90::acc_rowcol). The 128 words are
// all generated first (the kernel's warpgroup barrier), then each thread reads its 8.
template <int D>
int check_sm90_bwd() {
  using B = flash::sm90::BwdTraitsFor<cutlass::bfloat16_t, D, false, true>;  // the dropout kernel's tile
  using T = flash::sm90::BwdDropoutT;
  static_assert(B::kBlockM == T::kQueries && B::kWGKeys == T::kKeys, "the dropout tile is 64 keys x 64 queries");
  constexpr uint32_t kThresholds[3] = {1, 230, 256};
  char name[64];
  std::snprintf(name, sizeof(name), "sm90 bwd dropout d=%d %dx%d keys x queries (per warpgroup)", D, T::kKeys,
                T::kQueries);
  // tiles at a few positions (first key, first query: multiples of 64), rng with a carry into the
  // high base word
  const int keys0[2] = {0, 64 * 5}, queries0[2] = {0, 64 * 3};
  int bad = 0, total = 0, dropped = 0;
  for (int t = 0; t < 4; ++t) {
    const int key0 = keys0[t / 2], query0 = queries0[t % 2];
    const flash::DropoutRng rng{0x9E3779B9u + uint32_t(t), 0x12345u, (uint64_t(1) << 32) - 1 + uint64_t(t),
                                kThresholds[t % 3]};
    alignas(16) uint32_t words[T::kWords];
    for (int tid = 0; tid < T::kThreads; ++tid) { words[tid] = T::make_word(rng, tid, key0, query0); }
    int visits[T::kKeys][T::kQueries] = {};
    for (int tid = 0; tid < T::kThreads; ++tid) {
      typename B::MmaSdP mma;
      auto thr = mma.get_thread_slice(tid);
      Tensor c = thr.partition_C(make_identity_tensor(Shape<Int<T::kKeys>, Int<T::kQueries>>{}));
      Tensor rc = make_tensor(c.data(), flash::sm90::acc_rowcol(c.layout()));  // (keys, queries) as the mainloop
      uint32_t flags[T::kWordsPerThread];
      T::read(flags, words, tid);
      for (int r = 0; r < size<0>(rc); ++r)
        for (int cc = 0; cc < size<1>(rc); ++cc) {
          const int key = get<0>(rc(r, cc)), query = get<1>(rc(r, cc));
          const bool kept = T::drop_mask(flags, r, cc) == 0;
          ++total;
          dropped += !kept;
          ++visits[key][query];
          if (kept != flash::dropout_keep(rng, query0 + query, key0 + key) && bad++ < 5) {
            std::printf("%s: tile %d tid %d (r %d, cc %d) = key %d query %d: kept %d\n", name, t, tid, r, cc, key,
                        query, int(kept));
          }
        }
    }
    for (int k = 0; k < T::kKeys; ++k)
      for (int q = 0; q < T::kQueries; ++q)
        if (visits[k][q] != 1 && bad++ < 5) { std::printf("%s: (key %d, query %d) held %d times\n", name, k, q, visits[k][q]); }
  }
  std::printf("%s: %d elements checked (%d dropped), %d bad\n", name, total, dropped, bad);
  return bad + (dropped == 0);  // threshold 1 drops most: a check that never sees a drop proves nothing
}

// The role-split tile (d = 256, sm90/bwd_mainloop_split.h): consumer 0 makes its flags in registers
// (BwdDropoutT::make_half of its lane and of lane ^ 4, flags_from_halves: equal to read() of the
// word buffer, checked), marks the dropped elements of
// P^T by their sign (BwdDropoutSplit::mark on drop_mask) and stores its fragment to sP as the kernel
// does (float4 j of thread t at [j][t], accumulator order); consumer 1's thread t loads float4 j into
// its own fragment, views it and its dP^T through its own MmaSdP partition, and makes dS^T with
// BwdDropoutSplit::ds; consumer 0's dV operand is kept_p. Both against the formulas with
// dropout_keep(query, key), on made-up P (zeros where a mask would put them), dP and D.
template <int D>
int check_sm90_bwd_split() {
  using B = flash::sm90::BwdTraitsFor<cutlass::bfloat16_t, D, false, true>;  // the dropout kernel's tile
  using T = flash::sm90::BwdDropoutT;
  using S = flash::sm90::BwdDropoutSplit;
  static_assert(B::kRoleSplit && B::kBlockN == T::kKeys && B::kBlockM == T::kQueries, "the role-split tile");
  using TileS = Shape<Int<T::kKeys>, Int<T::kQueries>>;
  auto value = [](int key, int query, uint32_t salt) {  // in [0, 1), exactly 0 for a few
    uint32_t h = uint32_t(key) * 0x9E3779B1u ^ uint32_t(query) * 0x85EBCA77u ^ salt;
    h ^= h >> 15;
    h *= 0x2C1B3C6Du;
    h ^= h >> 12;
    return (h % 64u == 0) ? 0.f : float(h >> 8) / float(1u << 24);
  };
  const float rp = 256.f / 230.f;
  int bad = 0, total = 0, dropped = 0, zeros = 0;
  for (int t = 0; t < 2; ++t) {
    const int key0 = t ? 64 * 7 : 0, query0 = t ? 64 * 2 : 0;
    const flash::DropoutRng rng{0x1234567u + uint32_t(t), 0xABCDu, (uint64_t(1) << 32) - 2 + uint64_t(t),
                                t ? 128u : 230u};
    alignas(16) uint32_t words[T::kWords];
    for (int tid = 0; tid < T::kThreads; ++tid) { words[tid] = T::make_word(rng, tid, key0, query0); }
    static float4 sp[B::kPValues / 4 * 128];
    for (int tid = 0; tid < T::kThreads; ++tid) {  // consumer 0
      typename B::MmaSdP mma;
      auto thr = mma.get_thread_slice(tid);
      Tensor frag = partition_fragment_C(mma, TileS{});  // S^T, then P^T
      Tensor s = make_tensor(frag.data(), flash::sm90::acc_rowcol(frag.layout()));
      Tensor c = thr.partition_C(make_identity_tensor(TileS{}));
      Tensor rc = make_tensor(c.data(), flash::sm90::acc_rowcol(c.layout()));
      uint32_t flags[T::kWordsPerThread], mine[4], other[4], from_words[T::kWordsPerThread];
      T::make_half(mine, rng, tid, key0, query0);  // the kernel's register form (make_flags): this lane's
      T::make_half(other, rng, tid ^ 4, key0, query0);  // half and its shuffle partner's
      T::flags_from_halves(flags, mine, other, tid);
      T::read(from_words, words, tid);  // equal to the shared-buffer form's flags
      for (int i = 0; i < T::kWordsPerThread; ++i) {
        if (flags[i] != from_words[i] && bad++ < 5) {
          std::printf("split flags: tid %d word %d: %08x, the buffer's %08x\n", tid, i, flags[i], from_words[i]);
        }
      }
      for (int r = 0; r < size<0>(s); ++r)
        for (int cc = 0; cc < size<1>(s); ++cc) {
          const int key = get<0>(rc(r, cc)), query = get<1>(rc(r, cc));
          const float pv = value(key0 + key, query0 + query, 1);
          s(r, cc) = S::mark(pv, T::drop_mask(flags, r, cc));
          const bool keep = flash::dropout_keep(rng, query0 + query, key0 + key);
          const float want = keep ? pv : 0.f, got = S::kept_p(s(r, cc));
          ++total;
          if (got != want && bad++ < 5) {
            std::printf("split dV operand: tid %d key %d query %d: %g, want %g\n", tid, key, query, got, want);
          }
        }
      B::store_p(sp, frag, tid);  // the kernel's own sP layout (bwd_traits_split.h)
    }
    for (int tid = 0; tid < T::kThreads; ++tid) {  // consumer 1
      typename B::MmaSdP mma;
      auto thr = mma.get_thread_slice(tid);
      Tensor fdp = partition_fragment_C(mma, TileS{});  // dP^T
      Tensor fp = make_tensor<float>(fdp.layout());     // P^T from sP
      B::load_p(sp, fp, tid);
      Tensor dp = make_tensor(fdp.data(), flash::sm90::acc_rowcol(fdp.layout()));
      Tensor pm = make_tensor(fp.data(), flash::sm90::acc_rowcol(fp.layout()));
      Tensor c = thr.partition_C(make_identity_tensor(TileS{}));
      Tensor rc = make_tensor(c.data(), flash::sm90::acc_rowcol(c.layout()));
      for (int r = 0; r < size<0>(dp); ++r)
        for (int cc = 0; cc < size<1>(dp); ++cc) {
          const int key = get<0>(rc(r, cc)), query = get<1>(rc(r, cc));
          const float pv = value(key0 + key, query0 + query, 1);
          const float dpv = value(key0 + key, query0 + query, 2) - 0.5f, d = value(0, query0 + query, 3) - 0.5f;
          const bool keep = flash::dropout_keep(rng, query0 + query, key0 + key);
          const float want = pv * std::fma(keep ? dpv : 0.f, rp, -d);
          const float got = S::ds(pm(r, cc), dpv, rp, d);
          ++total;
          dropped += !keep;
          zeros += pv == 0.f;
          if (got != want && bad++ < 5) {
            std::printf("split dS: tid %d key %d query %d keep %d: %g, want %g\n", tid, key, query, int(keep), got, want);
          }
        }
    }
  }
  std::printf("sm90 bwd dropout d=%d role split (P^T sign to consumer 1): %d values checked (%d dropped, "
              "%d P = 0), %d bad\n", D, total, dropped, zeros, bad);
  return bad + (dropped == 0) + (zeros == 0);  // drops and zero P both seen, or the check proves less
}

int main() {
  return (check_bytes() + check_budget<227>() + check_budget<163>() + check_budget<99>() + check_sm90<64>() +
          check_sm90<128>() + check_sm90<256>() + check_sm90_bwd<64>() + check_sm90_bwd<128>() +
          check_sm90_bwd<256>() + check_sm90_bwd_split<256>()) != 0;
}
