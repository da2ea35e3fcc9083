// Attention dropout in the sm90 backward, whose scores are transposed (S^T: a consumer warpgroup's
// 64 keys along the wgmma M rows, 64 queries along N). The mask is philox.h's (a pure function of
// (query, key)), but apply_dropout's walk (dropout.h) needs whole Philox calls in one thread, and the
// transposed wgmma accumulator splits every call: thread (warp w, lane L) holds keys
// 16 w + L / 4 + 8 r and queries 8 j + 2 (L % 4) + c (r, c < 2, j < 8), so a call's 16 elements
// (philox.h: 8 keys of 4 different 16-key blocks x 2 queries) lie in 8 threads of all 4 warps,
// 2 elements each. Making each call in every thread that uses it would be 8x the Philox work.
// Instead, per query block (64 x 64 elements = 256 calls per warpgroup):
//   generate: thread t makes the 2 calls of word t and packs their 32 keep bits into word t of a
//             128-word shared buffer (one st.shared each);
//   (a warpgroup barrier, by the caller)
//   read:     each thread loads the 8 words holding its 32 elements (two 16-byte loads; the 8 threads
//             of one lane group share them) and shifts its bits to bit 7 of a byte each;
//   drop_mask: all ones iff element (r, cc) of its rowcol view is dropped (one PRMT, byte_sign_mask).
// Word layout: t = g * 8 + r * 4 + J, g = (L / 8) * 4 + L % 4 the readers' lane group (its calls'
// counter lane (query % 8) * 4 + (key % 8) / 2 is (2 (L % 4) + c) * 4 + L / 8), r the key octet
// parity, J = j / 2 the 16-query block; bits 16 c + 8 (j % 2) + (2 w + (L / 4) % 2) (philox.h's slot
// of the element, ((query / 8) % 2) * 8 + ((key / 16) % 4) * 2 + key % 2, within the call c).
// tools/dropout_layout_check.cu runs generate / read / drop_mask on the host for every thread of the
// warpgroup against dropout_keep.
//
// The role-split tile (d = 256, bwd_mainloop_split.h: one CTA of 64 keys, consumer 0 S^T / P^T / dV,
// consumer 1 dP^T / dS^T / dK): both consumers' fragments are MmaSdP's partition of the same 64 keys x
// 64 queries, thread t of either warpgroup holding the same elements in the same accumulator order.
// Consumer 0 alone makes the mask, in registers (make_flags: 8 calls per thread and a shuffle, under
// its S^T GEMM, where it would otherwise wait; the shared word buffer's warpgroup barrier made
// compute-sanitizer racecheck report the sP hand-over, 48 hazards, on the H200) and hands it to
// consumer 1 inside P^T itself: the fp32
// P^T it stores to sP for consumer 1 carries the sign bit of the dropped elements (P >= 0; sm80's
// kEncodeSign does the same in one tile). BwdDropoutSplit has the three element steps; the layout
// check runs them for every thread too.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "../dropout.h"

namespace flash::sm90 {

struct BwdDropoutT {
  static constexpr int kKeys = 64;      // per consumer warpgroup (wgmma M)
  static constexpr int kQueries = 64;   // kBlockM (wgmma N)
  static constexpr int kThreads = 128;  // one warpgroup
  static constexpr int kWords = 128;    // 256 calls, 2 per word: the shared buffer of one warpgroup
  static constexpr int kWordsPerThread = 8;

  // Bits 0..15: bit 8 (s / 8) + s % 8 = slot s of the call's 16 elements is dropped (slot s is byte
  // s % 4 of Philox word s / 4): each dropout_drop_bits word's 4 bit-7 flags gathered by one multiply
  // (bit 7 + 8 i lands on bit 28 + i and no partial products overlap).
  CUTE_HOST_DEVICE static uint32_t pack_call(const PhiloxCounter& r, DropoutBytes b) {
    auto gather = [](uint32_t d) { return ((d & 0x80808080u) * 0x00204081u) >> 28; };
    return gather(dropout_drop_bits(r.x, b)) | (gather(dropout_drop_bits(r.y, b)) << 4) |
           (gather(dropout_drop_bits(r.z, b)) << 8) | (gather(dropout_drop_bits(r.w, b)) << 12);
  }

  // Word tid of the warpgroup's buffer for the tile whose first key is key0 (a multiple of 64) and
  // first query query0 (a multiple of 64), both counted from the sequence's start.
  CUTE_HOST_DEVICE static uint32_t make_word(const DropoutRng& rng, int tid, int key0, int query0) {
    const int g = tid / 8, r = (tid / 4) % 2, big_j = tid % 4;
    const int key = key0 + 8 * r + 2 * (g / 4);           // key % 8 = 2 (L / 8): counter lane's low part
    const int query = query0 + 16 * big_j + 2 * (g % 4);  // + c: query % 8 = 2 (L % 4) + c
    const DropoutBytes b = dropout_bytes(rng.threshold);
    const uint32_t c0 = pack_call(philox4x32_10(dropout_counter(rng, query, key), rng.key0, rng.key1), b);
    const uint32_t c1 = pack_call(philox4x32_10(dropout_counter(rng, query + 1, key), rng.key0, rng.key1), b);
    return c0 | (c1 << 16);
  }

  // The 8 words of thread tid's elements, each shifted so that its bits sit at bit 7 of bytes
  // (j % 2) + 2 c: flags[r * 4 + j / 2].
  // words: the buffer, 16-byte aligned.
  CUTE_HOST_DEVICE static void read(uint32_t (&flags)[kWordsPerThread], const uint32_t* words, int tid) {
    const int lane = tid % 32;
    const int g = (lane / 8) * 4 + lane % 4;
    const int bit = 2 * (tid / 32) + (lane / 4) % 2;  // philox.h slot % 8 of every element of the thread
    const uint4* src = reinterpret_cast<const uint4*>(words + g * kWordsPerThread);  // 32-byte aligned
    const uint4 lo = src[0], hi = src[1];
    const uint32_t w[kWordsPerThread] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
    CUTE_UNROLL
    for (int i = 0; i < kWordsPerThread; ++i) { flags[i] = w[i] << (7 - bit); }
  }

  // read()'s flags made in registers, without the shared buffer and its warpgroup barrier (the
  // role-split tile): lanes L and L ^ 4 of a warp read the same 8 words (g ignores lane bit 2), so
  // lane L makes the half h = (L / 4) % 2 of them (words g * 8 + 4 h + j, j < 4: 8 Philox calls, 4x
  // the shared-buffer form's 2) and the pair swaps halves by one shuffle per word. make_half and
  // flags_from_halves are the host-checkable steps (tools/dropout_layout_check.cu).
  CUTE_HOST_DEVICE static void make_half(uint32_t (&half)[4], const DropoutRng& rng, int tid, int key0, int query0) {
    const int lane = tid % 32;
    const int word0 = ((lane / 8) * 4 + lane % 4) * kWordsPerThread + 4 * ((lane / 4) % 2);
    CUTE_UNROLL
    for (int j = 0; j < 4; ++j) { half[j] = make_word(rng, word0 + j, key0, query0); }
  }
  // mine: this lane's make_half, other: lane tid ^ 4's. Selects, not a runtime index into flags
  // (which would put the array in local memory).
  CUTE_HOST_DEVICE static void flags_from_halves(uint32_t (&flags)[kWordsPerThread], const uint32_t (&mine)[4],
                                                 const uint32_t (&other)[4], int tid) {
    const bool upper = ((tid % 32) / 4) % 2;
    const int bit = 2 * (tid / 32) + ((tid % 32) / 4) % 2;
    CUTE_UNROLL
    for (int j = 0; j < 4; ++j) {
      flags[j] = (upper ? other[j] : mine[j]) << (7 - bit);
      flags[4 + j] = (upper ? mine[j] : other[j]) << (7 - bit);
    }
  }
  // The whole warp, converged.
  CUTE_DEVICE static void make_flags(uint32_t (&flags)[kWordsPerThread], const DropoutRng& rng, int tid, int key0,
                                     int query0) {
    uint32_t mine[4], other[4];
    make_half(mine, rng, tid, key0, query0);
    CUTE_UNROLL
    for (int j = 0; j < 4; ++j) { other[j] = __shfl_xor_sync(0xffffffffu, mine[j], 4); }
    flags_from_halves(flags, mine, other, tid);
  }

  // All ones iff element (r, cc) of the thread's rowcol view (key row r, query column cc = 2 j + c)
  // is dropped.
  CUTE_HOST_DEVICE static uint32_t drop_mask(const uint32_t (&flags)[kWordsPerThread], int r, int cc) {
    return byte_sign_mask(flags[r * 4 + cc / 4], (cc / 2) % 2 + 2 * (cc % 2));
  }
};

// The role-split tile's element steps (see above). P^T >= 0 (an exponential, or 0 where masked).
struct BwdDropoutSplit {
  // Consumer 0: the P^T value for sP, its sign bit set iff dropped (dropped: drop_mask's all ones or 0).
  CUTE_HOST_DEVICE static float mark(float p, uint32_t dropped) {
    uint32_t bits;
    memcpy(&bits, &p, sizeof(bits));
    bits |= dropped & 0x80000000u;
    memcpy(&p, &bits, sizeof(p));
    return p;
  }
  // Consumer 0: P^T o M, the dV operand (its 1 / (1 - p) is applied to dV at the store).
  CUTE_HOST_DEVICE static float kept_p(float marked) { return fmaxf(marked, 0.f); }
  // Consumer 1: dS^T = P^T o (dP^T o M * rp_dropout - D) from the marked P^T (as sm80's bwd_kernel.h:
  // a dropped -0 counts as kept, its |P| = 0 zeroes the product all the same).
  CUTE_HOST_DEVICE static float ds(float marked, float dp, float rp_dropout, float d) {
    return fabsf(marked) * fmaf(marked >= 0.f ? dp : 0.f, rp_dropout, -d);
  }
};

}  // namespace flash::sm90
