// Attention dropout on register fragments (FA2's scheme, our own counter map: philox.h). The
// forward keeps each P element with probability 1 - p and folds 1 / (1 - p) into the final
// normalisation (the row sums use the undropped P, so the LSE is unchanged); the backward
// regenerates the same mask from the seed/offset the forward wrote to rng_state.
#pragma once

#include <cute/tensor.hpp>

#include "params.h"
#include "philox.h"

namespace flash {

using namespace cute;

// The generator state of one call (PhiloxState: values, or device pointers under CUDA-graph
// capture), for (batch, head).
CUTE_DEVICE DropoutRng dropout_rng(const FwdParams& p, int batch, int head) {
  const uint64_t seed = p.philox.captured ? uint64_t(*p.philox.seed_ptr) : p.philox.seed;
  const uint64_t offset =
      p.philox.captured ? uint64_t(*p.philox.offset_ptr) + p.philox.offset_intragraph : p.philox.offset;
  return DropoutRng{uint32_t(seed), uint32_t(seed >> 32), offset + uint64_t(batch) * uint64_t(p.nheads) + head,
                    p.dropout_threshold};
}

// rng_state = (seed, offset) as this call used them (the backward's input), written by one thread of
// the grid: under graph capture the values exist only on the device, at replay.
CUTE_DEVICE void write_rng_state(const FwdParams& p) {
  if (p.rng_state_ptr != nullptr && threadIdx.x == 0 && blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0) {
    const uint64_t seed = p.philox.captured ? uint64_t(*p.philox.seed_ptr) : p.philox.seed;
    const uint64_t offset =
        p.philox.captured ? uint64_t(*p.philox.offset_ptr) + p.philox.offset_intragraph : p.philox.offset;
    p.rng_state_ptr[0] = int64_t(seed);
    p.rng_state_ptr[1] = int64_t(offset);
  }
}

// How a thread walks the Philox calls of its S fragment (philox.h's layout), for a TiledMMA with
// kWarpsN warps across the columns: atom n of the rowcol view (columns 2n, 2n + 1) covers key octet
// warp_n + kWarpsN * n of the tile. Per 16 rows x 64 columns a thread holds kAtoms64 atoms, in
// kCalls Philox calls of 4 atoms each:
//   kWarpsN = 1 (forward, sm90): 8 atoms, octets of parity `call` are atoms call + 2 i: 2 calls;
//   kWarpsN = 2 (backward): 4 atoms, one parity (warp_n): 1 call.
// (4 warps across would hold half of each call's octets: the backward's dropout kernels rearrange
// their S/dP warps instead, bwd_tile_config.h BwdDropoutTraitsFor.) Element (half, column) of atom
// i of a call (rows r, r + 8) is byte `byte` of word `word` of the Philox output.
template <int kWarpsN>
struct DropoutWalk {
  static_assert(kWarpsN == 1 || kWarpsN == 2, "a thread must hold whole Philox calls (philox.h)");
  static constexpr int kAtoms64 = 8 / kWarpsN;
  static constexpr int kCalls = kWarpsN == 1 ? 2 : 1;
  static constexpr int kAtomsPerCall = 4;
  CUTE_HOST_DEVICE static constexpr int atom(int call, int i) { return kWarpsN == 1 ? call + 2 * i : i; }
  CUTE_HOST_DEVICE static constexpr int word(int half, int i) { return half * 2 + i / 2; }
  CUTE_HOST_DEVICE static constexpr int byte(int i, int column) { return (i % 2) * 2 + column; }
  // The counter of call `call` of 64-column block `block` in the row pair row_delta rows (a multiple
  // of 16) below the fragment's first, from the counter of the first call (philox.h's counter is
  // affine in the 64-column block, the parity and the 16-row block): no divisions per call.
  CUTE_HOST_DEVICE static PhiloxCounter counter(PhiloxCounter first, int row_delta, int block, int call) {
    first.x += uint32_t(2 * block + (kWarpsN == 1 ? call : 0));
    first.y += uint32_t(2 * row_delta);  // 32 per 16 rows
    return first;
  }
};

// The keep test of 4 bytes at once, without predicates (a predicate per element ran ptxas out of
// predicate registers: it parked them as bits of general registers, 3 more instructions each).
// Byte x is dropped iff x > u = t - 1 (u in [0, 255]; t = 256 keeps all). Per byte, bit 7 of
//   d = (w | 0x80808080) - ((U & 0x7F7F7F7F) + 0x01010101)     (no borrow crosses a byte)
// is (x & 0x7F) > (u & 0x7F), and x > u iff (x7 & !u7) | (x7 == u7 & d7): one LOP3. U = u * 0x01010101.
struct DropoutBytes {
  uint32_t u4, c4;  // U and (U & 0x7F7F7F7F) + 0x01010101
};
CUTE_HOST_DEVICE constexpr DropoutBytes dropout_bytes(uint32_t threshold) {
  const uint32_t u4 = (threshold - 1u) * 0x01010101u;
  return DropoutBytes{u4, (u4 & 0x7F7F7F7Fu) + 0x01010101u};
}
// Bit 7 of byte j: byte j of `word` is dropped (the other bits are junk).
CUTE_HOST_DEVICE uint32_t dropout_drop_bits(uint32_t word, DropoutBytes b) {
  const uint32_t d = (word | 0x80808080u) - b.c4;
  return (word & ~b.u4) | (~(word ^ b.u4) & d);
}
// All ones iff bit 7 of byte j of bits is set: one PRMT with sign replication.
CUTE_HOST_DEVICE uint32_t byte_sign_mask(uint32_t bits, int j) {
#if defined(__CUDA_ARCH__)
  uint32_t out;
  asm("prmt.b32 %0, %1, 0, %2;" : "=r"(out) : "r"(bits), "r"(uint32_t(0x8888 | (j * 0x1111))));
  return out;
#else
  return ((bits >> (8 * j + 7)) & 1u) ? 0xFFFFFFFFu : 0u;
#endif
}

// Drops elements of an S/P tile: s, coords are rowcol views ((2, MMA_M), (2, MMA_N)) of the SM80
// accumulator (or of a wgmma accumulator, whose warps hold the same 16 x 8 C-fragment pattern: call
// it with kWarpsN = 1) and of its identity partition; row0, col0 the tile's first row/key in its
// sequence. kWarpsN: warps of the TiledMMA across the columns (DropoutWalk). Dropped elements become
// 0, or -x with kEncodeSign (the backward keeps P and the mask in one tile).
template <int kWarpsN, bool kEncodeSign, class S, class Coords>
CUTE_DEVICE void apply_dropout(S& s, Coords const& coords, const DropoutRng& rng, int row0, int col0) {
  using Walk = DropoutWalk<kWarpsN>;
  constexpr int kRows = decltype(size<0>(s))::value;
  constexpr int kAtomsN = decltype(size<1>(s))::value / 2;
  static_assert(kRows % 2 == 0 && kAtomsN % Walk::kAtoms64 == 0, "whole 16 x 64 dropout blocks per tile");
  const DropoutBytes bytes = dropout_bytes(rng.threshold);
  const int first_row = get<0>(coords(0, 0)), first_col = col0 + get<1>(coords(0, 0));
  const PhiloxCounter first = dropout_counter(rng, row0 + first_row, first_col);
  CUTE_UNROLL
  for (int m = 0; m < kRows / 2; ++m) {
    CUTE_UNROLL
    for (int block = 0; block < kAtomsN / Walk::kAtoms64; ++block) {
      CUTE_UNROLL
      for (int call = 0; call < Walk::kCalls; ++call) {
        const int row_delta = get<0>(coords(2 * m, 0)) - first_row;
        const PhiloxCounter r = philox4x32_10(Walk::counter(first, row_delta, block, call), rng.key0, rng.key1);
        uint32_t drop[4] = {dropout_drop_bits(r.x, bytes), dropout_drop_bits(r.y, bytes),
                            dropout_drop_bits(r.z, bytes), dropout_drop_bits(r.w, bytes)};
        CUTE_UNROLL
        for (int i = 0; i < Walk::kAtomsPerCall; ++i) {
          const int n = block * Walk::kAtoms64 + Walk::atom(call, i);
          CUTE_UNROLL
          for (int half = 0; half < 2; ++half) {
            CUTE_UNROLL
            for (int column = 0; column < 2; ++column) {
              float& x = s(2 * m + half, 2 * n + column);
              const uint32_t mask = byte_sign_mask(drop[Walk::word(half, i)], Walk::byte(i, column));
              // P >= 0: dropped -> +0 (forward) or its sign set, -x (backward)
              x = __uint_as_float(kEncodeSign ? __float_as_uint(x) ^ (mask & 0x80000000u)
                                              : __float_as_uint(x) & ~mask);
            }
          }
        }
      }
    }
  }
}

}  // namespace flash
