// Whether the build compiled the sm90 unit a call needs (host only; fwd_dispatch.cu and
// bwd_dispatch.cu): the call's dtype among the built ones, its head dim in the direction's list
// (instantiations/build_config.h FLASH_SM90_*FOR_EACH_HDIM) and, with dropout, in the list of that
// direction's dropout variant (built with the feature kernels).
//   sm90_unit_compiled(params, {FLASH_SM90_FOR_EACH_HDIM(FLASH_LIST_ITEM)},
//                      {FLASH_SM90_DROPOUT_FOR_EACH_HDIM(FLASH_LIST_ITEM)})
#pragma once

#include <initializer_list>

#include "instantiations/build_config.h"
#include "params.h"

#define FLASH_LIST_ITEM(D) D,

namespace flash {

inline bool sm90_unit_compiled(const FwdParams& params, std::initializer_list<int> hdims,
                               std::initializer_list<int> dropout_hdims) {
  bool dtype_built = false;
#define FLASH_CASE(ENUM, TYPE) dtype_built = dtype_built || params.dtype == DType::ENUM;
  FLASH_FOR_EACH_DTYPE(FLASH_CASE)
#undef FLASH_CASE
  const auto listed = [&](std::initializer_list<int> list) {
    for (const int d : list) {
      if (d == params.headdim_rounded) { return true; }
    }
    return false;
  };
  return dtype_built && listed(hdims) && (!needs_dropout(params) || listed(dropout_hdims));
}

}  // namespace flash
