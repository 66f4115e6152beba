// Portable qualifiers shared by host and device code. Torch-free.
#pragma once

#if defined(__CUDACC__) || defined(__HIPCC__)
#define PP_HD __host__ __device__ __forceinline__
#else
#define PP_HD inline
#endif

#include <cstdint>
