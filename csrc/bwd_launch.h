// Launch template of the sm80 family's backward (see bwd_kernel.h): dq_accum zeroed, pre-pass, main
// kernel, dQ conversion, in stream order. (The sm90 family's: sm90/bwd_launch.h.)
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

#include "bwd_kernel.h"
#include "bwd_kernel_traits.h"
#include "bwd_tile_config.h"
#include "params.h"

namespace flash {

// DropoutTraits: the dropout kernel's (bwd_tile_config.h BwdDropoutTraitsFor), the same tile and block.
template <typename Traits, typename DropoutTraits>
cudaError_t launch_bwd(const BwdParams& params, cudaStream_t stream) {
  static_assert(DropoutTraits::kBlockM == Traits::kBlockM && DropoutTraits::kBlockN == Traits::kBlockN &&
                    DropoutTraits::kNThreads == Traits::kNThreads && DropoutTraits::kSmemBytes == Traits::kSmemBytes &&
                    std::is_same_v<typename DropoutTraits::TiledMmadQ, typename Traits::TiledMmadQ>,
                "the dropout kernel shares the launch, the grid and dq_accum's layout");
  using Element = typename Traits::Element;
  // As launch_fwd: the kMods kernels unless the options need none of them; dropout its own.
  const bool varlen = params.cu_seqlens_q != nullptr;
  const bool mods = needs_mods(params);
#ifdef FLASH_ATTN_CUDA_NO_FEATURES
  if (mods) { return cudaErrorNotSupported; }
  auto prepass = &bwd_prepass_kernel<Element, false>;
  auto kernel = &bwd_kernel<Traits, false>;
  auto convert = &bwd_convert_dq_kernel<Traits, false>;
#else
  auto prepass = varlen ? &bwd_prepass_kernel<Element, true> : &bwd_prepass_kernel<Element, false>;
  auto kernel = mods ? &bwd_kernel<Traits, true, false> : &bwd_kernel<Traits, false, false>;
  if (needs_dropout(params)) {
    if constexpr (dropout_tile(Traits::kBlockN)) {
      kernel = &bwd_kernel<DropoutTraits, true, true>;
    } else {
      return cudaErrorNotSupported;  // the binding refuses these calls first (check_bwd_smem)
    }
  }
  auto convert = varlen ? &bwd_convert_dq_kernel<Traits, true> : &bwd_convert_dq_kernel<Traits, false>;
#endif
  // dq_accum: (num_dq_splits, rows of every (batch, head) or varlen scratch rows, headdim_rounded) fp32.
  const int64_t scratch_rows = varlen ? int64_t(params.nheads) * params.varlen_scratch_rows
                                      : int64_t(params.batch) * params.nheads * params.seqlen_q_rounded;
  cudaError_t err = cudaMemsetAsync(params.dq_accum_ptr, 0,
                                    size_t(params.num_dq_splits) * scratch_rows * params.headdim_rounded * sizeof(float),
                                    stream);
  if (err != cudaSuccess) { return err; }
  const dim3 padded_row_grid(params.seqlen_q_rounded / 8, params.nheads, params.batch);
  prepass<<<padded_row_grid, 256, 0, stream>>>(params);
  err = cudaGetLastError();
  if (err != cudaSuccess) { return err; }

  constexpr int kSmem = Traits::kSmemBytes;
  if constexpr (kSmem >= 48 * 1024) {
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
    if (err != cudaSuccess) { return err; }
  }
  const int n_blocks = (params.seqlen_k + Traits::kBlockN - 1) / Traits::kBlockN;
  const dim3 grid(params.deterministic ? params.num_dq_splits : n_blocks, params.nheads, params.batch);
  kernel<<<grid, Traits::kNThreads, kSmem, stream>>>(params);
  err = cudaGetLastError();
  if (err != cudaSuccess) { return err; }

  const dim3 tile_grid(params.seqlen_q_rounded / Traits::kBlockM, params.nheads, params.batch);
  convert<<<tile_grid, Traits::kNThreads, 0, stream>>>(params);
  return cudaGetLastError();
}

template <typename Element, int kHeadDim, int kBudgetKB>
cudaError_t run_bwd_(const BwdParams& params, cudaStream_t stream) {
  return launch_bwd<BwdTraitsFor<kHeadDim, Element, kBudgetKB>, BwdDropoutTraitsFor<kHeadDim, Element, kBudgetKB>>(
      params, stream);
}

}  // namespace flash
