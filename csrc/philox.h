// Counter-based random numbers for attention dropout: Philox4x32-10 (Salmon, Moraes, Dror, Shaw,
// "Parallel random numbers: as easy as 1, 2, 3", SC 2011; the generator curand calls
// philox4_32_10), and the map from an attention-score element to its Philox counter, so the
// dropout mask is a pure function of (seed, offset, batch, head, row, col): the forward and the
// backward (with different tiles and warp layouts) regenerate it exactly, and nothing is stored.
// Torch-free, host and device (tests/test_dropout_cpu.py compiles it with g++ against the
// Python reference, flash_attn_cuda/reference.py philox4x32_10 / dropout_keep_mask).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define FLASH_PHILOX_HD __host__ __device__ __forceinline__
#else
#define FLASH_PHILOX_HD inline
#endif

namespace flash {

struct PhiloxCounter {
  uint32_t x, y, z, w;
};

// 10 rounds; key bumped by the Weyl constants between rounds. The 32x32 -> 64-bit products are one
// IMAD.WIDE.U32 each on the GPU.
FLASH_PHILOX_HD PhiloxCounter philox4x32_10(PhiloxCounter c, uint32_t k0, uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;  // round multipliers
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;  // key schedule (golden ratio, sqrt(3) - 1)
#if defined(__CUDACC__)
#pragma unroll
#endif
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t(kM0) * c.x;
    const uint64_t p1 = uint64_t(kM1) * c.z;
    c = PhiloxCounter{uint32_t(p1 >> 32) ^ c.y ^ k0, uint32_t(p1), uint32_t(p0 >> 32) ^ c.w ^ k1, uint32_t(p0)};
    k0 += kW0;
    k1 += kW1;
  }
  return c;
}

// The dropout of one call: Philox key (the generator's seed), the base of its counters (the
// generator's offset; the call reserves batch * nheads of them, one per (batch, head), so two calls
// never share a counter), and the keep threshold: element kept iff its 16-bit random number < it.
struct DropoutRng {
  uint32_t key0, key1;  // seed, low and high words
  uint64_t base;        // offset + batch * nheads + head
  uint32_t threshold;   // round((1 - p) * 65536), in [0, 65536]
};

// Element (row, col) of the (seqlen_q x seqlen_k) scores of one (batch, head) -- row and col
// relative to the sequence's start (varlen), so the mask does not depend on tiling -- belongs to a
// chunk of 16 rows x 64 columns. Each chunk is 32 lanes x 8 elements, the lane and element index
// following the SM80 16x8 MMA accumulator layout so a thread of any warp tiling owns whole groups:
//   lane = (row % 8) * 4 + (col % 8) / 2                     (the MMA's C-fragment lane)
//   j    = ((row / 8) % 2) * 4 + ((col / 32) % 2) * 2 + col % 2     (16-bit slot of the output)
// and one Philox call per (chunk, column octet mod 4, lane) gives 8 x 16 bits:
//   counter = ((col / 64) * 4 + (col / 8) % 4, (row / 16) * 32 + lane, base low, base high)
// The pairing of column octets g and g + 4 (32 columns apart) is what the forward (one warp across
// the columns) and the backward (2 or 4 warps across them, octets 8*warp_n + 8*W*i) both hold in
// one thread.
FLASH_PHILOX_HD PhiloxCounter dropout_counter(const DropoutRng& rng, int row, int col) {
  const uint32_t lane = uint32_t(row % 8) * 4 + uint32_t(col % 8) / 2;
  return PhiloxCounter{uint32_t(col / 64) * 4 + uint32_t(col / 8) % 4, uint32_t(row / 16) * 32 + lane,
                       uint32_t(rng.base), uint32_t(rng.base >> 32)};
}

FLASH_PHILOX_HD int dropout_slot(int row, int col) { return ((row / 8) % 2) * 4 + ((col / 32) % 2) * 2 + col % 2; }

// 16-bit random number j (0..7) of a Philox output.
FLASH_PHILOX_HD uint32_t philox_u16(const PhiloxCounter& r, int j) {
  const uint32_t word = j < 2 ? r.x : j < 4 ? r.y : j < 6 ? r.z : r.w;
  return (j % 2 == 0) ? (word & 0xFFFFu) : (word >> 16);
}

// Whether element (row, col) is kept (the reference; the kernels evaluate a whole chunk per call).
FLASH_PHILOX_HD bool dropout_keep(const DropoutRng& rng, int row, int col) {
  const PhiloxCounter r = philox4x32_10(dropout_counter(rng, row, col), rng.key0, rng.key1);
  return philox_u16(r, dropout_slot(row, col)) < rng.threshold;
}

}  // namespace flash
