// Programmatic dependent launch on the device side (PTX griddepcontrol, sm90+; no-ops below, where
// the host launches without the attribute). Used by the KV-cache path: the split-KV combine starts
// while the decode grid drains.
#pragma once

#include <cute/config.hpp>

namespace flash {

// wait: every grid this one depends on has finished and its writes are visible. launch_dependents:
// this thread block lets the next grid (launched with cudaLaunchAttributeProgrammaticStreamSerialization)
// start once every thread block of this grid has called it or exited.
CUTE_DEVICE void griddep_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
CUTE_DEVICE void griddep_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

}  // namespace flash
