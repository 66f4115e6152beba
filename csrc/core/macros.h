// Portable qualifiers shared by host and device code. Torch-free.
#pragma once

#if defined(__CUDACC__) || defined(__HIPCC__)
#define PP_HD __host__ __device__ __forceinline__
#else
#define PP_HD inline
#endif

// `#pragma unroll` for the device compiler; nothing for a host compiler, which does not know
// the pragma and would warn at every use in every CPU translation unit.
#if defined(__CUDACC__) || defined(__HIPCC__)
#define PP_UNROLL _Pragma("unroll")
#else
#define PP_UNROLL
#endif

#include <cstdint>
