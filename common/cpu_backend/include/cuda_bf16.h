/**
 * \file cpu_backend/include/cuda_bf16.h
 * \brief CPU backend: the part of CUDA's bfloat16 API that the kernels use.
 *
 * `__nv_bfloat16` holds the 16 bits of a bfloat16 value (the top half of an fp32 word);
 * conversions from float round to nearest, ties to even, exactly as the GPU's
 * `__float2bfloat16_rn` (common/dtype.h holds the one implementation).
 */
#pragma once

#include <cstdint>

#include "common/dtype.h"
#include "cuda_fp16.h"

/// A bfloat16 value (its bits).
struct __nv_bfloat16 {
  std::uint16_t __x;  ///< the 16 bits
};
/// Two bfloat16 values; .x is the low 16 bits of the 32-bit word, as on the GPU.
struct alignas(4) __nv_bfloat162 {
  __nv_bfloat16 x;  ///< low half
  __nv_bfloat16 y;  ///< high half
};

/// float to bfloat16, round to nearest even.
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16{fa::float_to_bf16_bits(f)}; }
/// float to bfloat16, round to nearest even (CUDA's default rounding).
inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
/// bfloat16 to float (exact).
inline float __bfloat162float(__nv_bfloat16 h) { return fa::bf16_bits_to_float(h.__x); }
/// Two floats to a bfloat162 (a in .x, the low half), each rounded to nearest even.
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) {
  return __nv_bfloat162{__float2bfloat16_rn(a), __float2bfloat16_rn(b)};
}
/// The low half of a bfloat162, as float.
inline float __low2float(__nv_bfloat162 h) { return __bfloat162float(h.x); }
/// The high half of a bfloat162, as float.
inline float __high2float(__nv_bfloat162 h) { return __bfloat162float(h.y); }
/// A bfloat16 from its 16 bits.
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { return __nv_bfloat16{u}; }
/// The 16 bits of a bfloat16.
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
