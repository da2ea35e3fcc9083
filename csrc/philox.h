// Counter-based random numbers for attention dropout: Philox4x32-10 (Salmon, Moraes, Dror, Shaw,
// "Parallel random numbers: as easy as 1, 2, 3", SC 2011; the generator curand calls
// philox4_32_10), and the map from an attention-score element to its Philox counter, so the
// dropout mask is a pure function of (seed, offset, batch, head, row, col): the forward and the
// backward (with different tiles and warp layouts) regenerate it exactly, and nothing is stored.
// Torch-free, host and device (tests/test_dropout_cpu.py compiles it with g++ against the
// Python reference, flash_attn_cuda/reference.py philox4x32_10 / dropout_keep_mask).
#pragma once

#include <cstdint>

#include "host_device.h"

namespace flash {

struct PhiloxCounter {
  uint32_t x, y, z, w;
};

// 10 rounds; key bumped by the Weyl constants between rounds. On the GPU the products' halves are
// __umulhi and a plain multiply: the 64-bit product (IMAD.WIDE.U32) left an extra add per round in
// ptxas' output (sm_90: 12.7 -> 11.4 instructions per element of apply_dropout in isolation).
FLASH_HD PhiloxCounter philox4x32_10(PhiloxCounter c, uint32_t k0, uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;  // round multipliers
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;  // key schedule (golden ratio, sqrt(3) - 1)
#if defined(__CUDACC__)
#pragma unroll
#endif
  for (int round = 0; round < 10; ++round) {
#if defined(__CUDA_ARCH__)
    const uint32_t hi0 = __umulhi(kM0, c.x), lo0 = kM0 * c.x;
    const uint32_t hi1 = __umulhi(kM1, c.z), lo1 = kM1 * c.z;
#else
    const uint64_t p0 = uint64_t(kM0) * c.x, p1 = uint64_t(kM1) * c.z;
    const uint32_t hi0 = uint32_t(p0 >> 32), lo0 = uint32_t(p0), hi1 = uint32_t(p1 >> 32), lo1 = uint32_t(p1);
#endif
    c = PhiloxCounter{hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0};
    k0 += kW0;
    k1 += kW1;
  }
  return c;
}

// The dropout of one call: Philox key (the generator's seed), the base of its counters (the
// generator's offset; the call reserves batch * nheads of them, one per (batch, head), so two calls
// never share a counter), and the keep threshold t: element kept iff its 8-bit random number < t.
// t = round((1 - p) * 256) in [1, 256] (dropout_threshold); the kept elements are scaled by 256 / t,
// so the output is unbiased for the keep rate the kernel actually has, t / 256 (which differs from
// 1 - p by at most 1/512; t = 0, p > 511/512, is refused by the binding).
struct DropoutRng {
  uint32_t key0, key1;  // seed, low and high words
  uint64_t base;        // offset + batch * nheads + head
  uint32_t threshold;   // t, in [1, 256]
};

// t for a dropout probability p (the binding and flash_attn_cuda/reference.py dropout_threshold).
FLASH_HD uint32_t dropout_threshold(double p) {
  const double t = (1.0 - p) * 256.0 + 0.5;
  return t <= 0.0 ? 0u : t >= 256.0 ? 256u : uint32_t(t);
}

// Element (row, col) of the (seqlen_q x seqlen_k) scores of one (batch, head) -- row and col
// relative to the sequence's start (varlen), so the mask does not depend on tiling -- takes one
// byte of a Philox output; one call gives 16 bytes to 16 elements that every tiling holds in one
// thread: the same rows row % 16 and row % 16 + 8 of a 16-row block, the same column pair
// (col % 8) / 2 of the SM80 16x8 MMA accumulator (lane = (row % 8) * 4 + (col % 8) / 2, the
// C-fragment lane) and the 4 column octets of one parity in a 64-column block:
//   counter = ((col / 64) * 2 + (col / 8) % 2, (row / 16) * 32 + lane, base low, base high)
//   slot    = ((row / 8) % 2) * 8 + ((col / 16) % 4) * 2 + col % 2     (byte: word slot / 4, byte slot % 4)
// A warp spanning the tile's columns alone (the forward; the sm90 wgmma accumulator) holds both
// parities: two calls per 16 x 64 per thread. The backward's dropout kernels have 2 warps across
// the columns (octets warp_n + 2 i): one parity, one call. (4 warps across would hold half a
// call's octets; bwd_tile_config.h BwdDropoutTraitsFor avoids them.) dropout.h DropoutWalk is the
// walk; tools/dropout_layout_check.cu checks it on every tile.
FLASH_HD PhiloxCounter dropout_counter(const DropoutRng& rng, int row, int col) {
  const uint32_t lane = uint32_t(row % 8) * 4 + uint32_t(col % 8) / 2;
  return PhiloxCounter{uint32_t(col / 64) * 2 + uint32_t(col / 8) % 2, uint32_t(row / 16) * 32 + lane,
                       uint32_t(rng.base), uint32_t(rng.base >> 32)};
}

FLASH_HD int dropout_slot(int row, int col) { return ((row / 8) % 2) * 8 + ((col / 16) % 4) * 2 + col % 2; }

// 8-bit random number j (0..15) of a Philox output: byte j % 4 of word j / 4.
FLASH_HD uint32_t philox_u8(const PhiloxCounter& r, int j) {
  const uint32_t word = j < 4 ? r.x : j < 8 ? r.y : j < 12 ? r.z : r.w;
  return (word >> (8 * (j % 4))) & 0xFFu;
}

// Whether element (row, col) is kept (the reference; the kernels evaluate a whole call at a time).
FLASH_HD bool dropout_keep(const DropoutRng& rng, int row, int col) {
  const PhiloxCounter r = philox4x32_10(dropout_counter(rng, row, col), rng.key0, rng.key1);
  return philox_u8(r, dropout_slot(row, col)) < rng.threshold;
}

}  // namespace flash
