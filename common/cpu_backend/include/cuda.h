/**
 * \file cpu_backend/include/cuda.h
 * \brief CPU backend: the part of the CUDA driver API that stage 08's host code uses,
 *        tensor maps for TMA copies, with CUDA's names and values.
 *
 * A CUtensorMap is 128 opaque bytes, as in CUDA; here they hold the backend's own record
 * of the tensor (written by cuTensorMapEncodeTiled, which the runtime hands out through
 * cudaGetDriverEntryPointByVersion) and read by the TMA emulation (fa_cpu/hopper.h).
 */
#pragma once

#include <cstdint>

typedef std::uint32_t cuuint32_t;  ///< the driver API's 32-bit unsigned
typedef std::uint64_t cuuint64_t;  ///< the driver API's 64-bit unsigned

/// Driver results (the values CUDA uses, for those the backend returns).
enum cudaError_enum {
  CUDA_SUCCESS = 0,              ///< no error
  CUDA_ERROR_INVALID_VALUE = 1,  ///< a bad argument
};
typedef enum cudaError_enum CUresult;  ///< CUDA's alias

/// A TMA descriptor: 128 bytes, 64-byte aligned.
typedef struct CUtensorMap_st {
  alignas(64) cuuint64_t opaque[16];  ///< the backend's record (fa_cpu/hopper.h)
} CUtensorMap;

/// Element types of a tensor map.
typedef enum CUtensorMapDataType_enum {
  CU_TENSOR_MAP_DATA_TYPE_UINT8 = 0,     ///< 1 byte
  CU_TENSOR_MAP_DATA_TYPE_UINT16 = 1,    ///< 2 bytes
  CU_TENSOR_MAP_DATA_TYPE_UINT32 = 2,    ///< 4 bytes
  CU_TENSOR_MAP_DATA_TYPE_INT32 = 3,     ///< 4 bytes
  CU_TENSOR_MAP_DATA_TYPE_UINT64 = 4,    ///< 8 bytes
  CU_TENSOR_MAP_DATA_TYPE_INT64 = 5,     ///< 8 bytes
  CU_TENSOR_MAP_DATA_TYPE_FLOAT16 = 6,   ///< 2 bytes
  CU_TENSOR_MAP_DATA_TYPE_FLOAT32 = 7,   ///< 4 bytes
  CU_TENSOR_MAP_DATA_TYPE_FLOAT64 = 8,   ///< 8 bytes
  CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 = 9,  ///< 2 bytes
} CUtensorMapDataType;

/// Interleaved layouts (only NONE is emulated).
typedef enum CUtensorMapInterleave_enum {
  CU_TENSOR_MAP_INTERLEAVE_NONE = 0,  ///< dense rows
  CU_TENSOR_MAP_INTERLEAVE_16B = 1,   ///< not emulated
  CU_TENSOR_MAP_INTERLEAVE_32B = 2,   ///< not emulated
} CUtensorMapInterleave;

/// How a box is swizzled in shared memory.
typedef enum CUtensorMapSwizzle_enum {
  CU_TENSOR_MAP_SWIZZLE_NONE = 0,  ///< rows as they are
  CU_TENSOR_MAP_SWIZZLE_32B = 1,   ///< 16-byte chunks XORed within 32-byte rows
  CU_TENSOR_MAP_SWIZZLE_64B = 2,   ///< ... within 64-byte rows
  CU_TENSOR_MAP_SWIZZLE_128B = 3,  ///< ... within 128-byte rows
} CUtensorMapSwizzle;

/// L2 promotion: accepted, ignored (there is no L2 here).
typedef enum CUtensorMapL2promotion_enum {
  CU_TENSOR_MAP_L2_PROMOTION_NONE = 0,      ///< none
  CU_TENSOR_MAP_L2_PROMOTION_L2_64B = 1,    ///< 64-byte lines
  CU_TENSOR_MAP_L2_PROMOTION_L2_128B = 2,   ///< 128-byte lines
  CU_TENSOR_MAP_L2_PROMOTION_L2_256B = 3,   ///< 256-byte lines
} CUtensorMapL2promotion;

/// What elements outside the tensor read as.
typedef enum CUtensorMapFloatOOBfill_enum {
  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE = 0,                    ///< zeros
  CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA = 1,    ///< NaN (floating-point types)
} CUtensorMapFloatOOBfill;

/// cuTensorMapEncodeTiled: checks the arguments as the driver does and records them.
CUresult cuTensorMapEncodeTiled(CUtensorMap* map, CUtensorMapDataType type, cuuint32_t rank, void* address,
                                const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box,
                                const cuuint32_t* element_strides, CUtensorMapInterleave interleave,
                                CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill fill);
