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

// Drops elements of an S/P tile: s, coords are rowcol views ((2, MMA_M), (2, MMA_N)) of the SM80
// accumulator and of its identity partition; row0, col0 the tile's first row/key in its sequence.
// kWarpsN: warps of the TiledMMA across the columns (atom n of a thread covers key octet
// warp_n + kWarpsN * n), so the octet 4 apart (philox.h's pair) is atom n + 4 / kWarpsN.
// Dropped elements become 0, or -x with kEncodeSign (the backward keeps P and the mask in one tile).
template <int kWarpsN, bool kEncodeSign, class S, class Coords>
CUTE_DEVICE void apply_dropout(S& s, Coords const& coords, const DropoutRng& rng, int row0, int col0) {
  constexpr int kRows = decltype(size<0>(s))::value;
  constexpr int kAtomsN = decltype(size<1>(s))::value / 2;
  static_assert(kWarpsN == 1 || kWarpsN == 2 || kWarpsN == 4, "octet pairs 32 columns apart need kWarpsN | 4");
  constexpr int kPartner = 4 / kWarpsN;
  static_assert(kRows % 2 == 0 && kAtomsN % (2 * kPartner) == 0, "whole 16 x 64 dropout chunks per tile");
  CUTE_UNROLL
  for (int m = 0; m < kRows / 2; ++m) {
    CUTE_UNROLL
    for (int n = 0; n < kAtomsN; ++n) {
      if ((n / kPartner) % 2 != 0) { continue; }  // the second octet of a pair: done with the first
      const int row = row0 + get<0>(coords(2 * m, 2 * n));
      const int col = col0 + get<1>(coords(2 * m, 2 * n));
      const PhiloxCounter r = philox4x32_10(dropout_counter(rng, row, col), rng.key0, rng.key1);
      CUTE_UNROLL
      for (int j = 0; j < 8; ++j) {  // j = half * 4 + octet * 2 + column (dropout_slot)
        const int half = j / 4, octet = (j / 2) % 2, column = j % 2;
        float& x = s(2 * m + half, 2 * (n + kPartner * octet) + column);
        const bool keep = philox_u16(r, j) < rng.threshold;
        x = keep ? x : (kEncodeSign ? -x : 0.f);
      }
    }
  }
}

}  // namespace flash
