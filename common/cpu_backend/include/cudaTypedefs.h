/**
 * \file cpu_backend/include/cudaTypedefs.h
 * \brief CPU backend: the driver function types that the project looks up by name
 *        (cudaGetDriverEntryPointByVersion).
 */
#pragma once

#include "cuda.h"

/// cuTensorMapEncodeTiled, as introduced in CUDA 12.0.
typedef CUresult (*PFN_cuTensorMapEncodeTiled_v12000)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                                     const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                                     const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                                     CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
