// FLASH_HD: a function of the torch- and CuTe-free headers that both the kernels and the host use
// (the dispatch, the binding, the g++-compiled CPU tests): __host__ __device__ under nvcc, inline elsewhere.
#pragma once

#if defined(__CUDACC__)
#define FLASH_HD __host__ __device__ __forceinline__
#else
#define FLASH_HD inline
#endif
