/**
 * \file cpu_backend/include/cuda_fp16.h
 * \brief CPU backend: the part of CUDA's half-precision API that the kernels use.
 *
 * `__half` holds the 16 bits of an IEEE binary16 value; conversions from float round to
 * nearest, ties to even, exactly as the GPU's `__float2half_rn` (common/dtype.h holds
 * the one implementation; a GPU test compares the bits with the hardware's).
 */
#pragma once

#include <cstdint>

#include "common/dtype.h"

/// An IEEE half-precision value (its bits).
struct __half {
  std::uint16_t __x;  ///< the 16 bits
};
/// Two halves; .x is the low 16 bits of the 32-bit word, as on the GPU.
struct alignas(4) __half2 {
  __half x;  ///< low half
  __half y;  ///< high half
};

/// float to half, round to nearest even.
inline __half __float2half_rn(float f) { return __half{fa::float_to_half_bits(f)}; }
/// float to half, round to nearest even (CUDA's default rounding).
inline __half __float2half(float f) { return __float2half_rn(f); }
/// half to float (exact).
inline float __half2float(__half h) { return fa::half_bits_to_float(h.__x); }
/// Two floats to a half2 (a in .x, the low half), each rounded to nearest even.
inline __half2 __floats2half2_rn(float a, float b) { return __half2{__float2half_rn(a), __float2half_rn(b)}; }
/// The low half of a half2, as float.
inline float __low2float(__half2 h) { return __half2float(h.x); }
/// The high half of a half2, as float.
inline float __high2float(__half2 h) { return __half2float(h.y); }
/// A half from its 16 bits.
inline __half __ushort_as_half(unsigned short u) { return __half{u}; }
/// The 16 bits of a half.
inline unsigned short __half_as_ushort(__half h) { return h.__x; }
