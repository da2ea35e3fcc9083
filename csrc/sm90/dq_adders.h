// How many K/V blocks of the sm90 backward add into one dQ tile (the dQ writer's tiles, d = 64 / 128).
// Torch- and CuTe-free, host and device: tests/test_dq_adders_cpu.py compiles it with g++ against the
// kernel's walk (bwd_kernel.h q_block_range, restated in Python).
#pragma once

#include "../host_device.h"

namespace flash::sm90 {

// The K/V blocks (kBlockN keys each) that add into query tile m (kBlockM rows): every block, or causal
// those with a key the tile's last row sees (n0 < (m + 1) kBlockM + seqlen_k - seqlen_q), blocks
// 0 .. count - 1. 0: none (causal rows that see no key; under store-first, bwd_api.h, nobody
// stored into dq_accum there and the dQ conversion writes zeros).
template <int kBlockM, int kBlockN>
FLASH_HD int dq_tile_adders(int m, int seqlen_q, int seqlen_k, bool causal) {
  const int n_blocks = (seqlen_k + kBlockN - 1) / kBlockN;
  if (!causal) { return n_blocks; }
  const int past = (m + 1) * kBlockM + seqlen_k - seqlen_q;  // keys before it see the tile's last row
  const int seen_by = (past + kBlockN - 1) / kBlockN;
  return past <= 0 ? 0 : (seen_by < n_blocks ? seen_by : n_blocks);
}

}  // namespace flash::sm90
