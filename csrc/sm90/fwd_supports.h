// stub, replaced by the kernel (sm90k's csrc/sm90/fwd_supports.h): the sm90 family serves no call
// yet, so the dispatch sends every call to the sm80 kernels. Host-only; fwd_dispatch.cu is the one
// translation unit that includes it.
#pragma once

#include "fwd_api.h"

namespace flash::sm90 {

bool fwd_supports(const FwdParams& /*params*/) { return false; }

}  // namespace flash::sm90
