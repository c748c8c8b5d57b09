/**
 * \file dtype.h
 * \brief The element types of Q, K, V and O (fp32, fp16, bf16), and the one
 *        implementation of rounding a float to fp16 or bf16 that the whole project uses.
 *
 * The 16-bit formats, as bits of one 16-bit word:
 *
 *     fp16 (IEEE binary16):  s eeeee mmmmmmmmmm        5 exponent bits, 10 mantissa bits
 *     bf16 (bfloat16):       s eeeeeeee mmmmmmm        8 exponent bits (fp32's), 7 mantissa bits
 *
 * bf16 is the top half of an fp32 word: same range as fp32, three significant decimal
 * digits. fp16 keeps more mantissa (about 3.3 digits) but overflows past 65504.
 * Conversions from float round to nearest, ties to even, exactly as the GPU's
 * `__float2half_rn` and `__float2bfloat16_rn` (the hardware test compares the bits).
 * Header-only and free of CUDA, so host code and the CPU backend's `cuda_fp16.h` and
 * `cuda_bf16.h` share it.
 */
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

namespace fa {

/// The element type of Q, K, V and O. The log-sum-exp is always fp32.
enum class DType : std::uint8_t {
  F32,   ///< IEEE single precision, 4 bytes
  F16,   ///< IEEE half precision, 2 bytes
  BF16,  ///< bfloat16, 2 bytes
};

/// "fp32", "fp16" or "bf16": the spelling of `--dtype`.
inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "fp32";
    case DType::F16: return "fp16";
    case DType::BF16: return "bf16";
  }
  return "?";
}

/// Bytes of one element.
inline std::size_t dtype_bytes(DType t) { return t == DType::F32 ? 4 : 2; }

/// The DType spelled `name` ("fp32", "fp16", "bf16"); false if there is none.
inline bool parse_dtype(const std::string& name, DType* out) {
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    if (name == dtype_name(t)) {
      *out = t;
      return true;
    }
  }
  return false;
}

// ---- bit-level conversions (round to nearest, ties to even) ----

/// The bits of a float.
inline std::uint32_t float_bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}
/// The float with these bits.
inline float bits_float(std::uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

/// fp32 to fp16 bits. Overflow gives ±inf, tiny values become fp16 subnormals or ±0,
/// NaN gives the canonical NaN 0x7FFF.
inline std::uint16_t float_to_half_bits(float x) {
  const std::uint32_t u = float_bits(x);
  const std::uint16_t sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t abs = u & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return 0x7FFF;                              // NaN
  if (abs >= 0x477FF000u) return static_cast<std::uint16_t>(sign | 0x7C00u);  // rounds past 65504: inf
  if (abs >= 0x38800000u) {  // normal in fp16 (>= 2^-14): rebias the exponent, round 13 bits away
    const std::uint32_t rebased = abs - ((127u - 15u) << 23);
    const std::uint32_t rounded = rebased + 0x0FFFu + ((rebased >> 13) & 1u);
    return static_cast<std::uint16_t>(sign | (rounded >> 13));
  }
  if (abs < 0x33000000u) return sign;  // below half the smallest subnormal (2^-25): ±0
  // Subnormal in fp16: the value in units of 2^-24, rounded to nearest even.
  const std::uint32_t exp = abs >> 23;
  const std::uint32_t mant = (abs & 0x7FFFFFu) | 0x800000u;  // the implicit 1 made explicit
  const std::uint32_t shift = 126u - exp;                     // from 2^(exp−150) units to 2^-24 units
  const std::uint32_t half = 1u << (shift - 1);
  const std::uint32_t rest = mant & ((1u << shift) - 1u);
  std::uint32_t q = mant >> shift;
  if (rest > half || (rest == half && (q & 1u))) ++q;
  return static_cast<std::uint16_t>(sign | q);
}

/// fp16 bits to fp32 (exact: every fp16 value is an fp32 value).
inline float half_bits_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu;
  if (exp == 0x1Fu) return bits_float(sign | 0x7F800000u | (mant << 13));  // inf or NaN
  if (exp != 0) return bits_float(sign | ((exp + 127u - 15u) << 23) | (mant << 13));
  // Zero or subnormal: mant · 2^-24.
  const float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
  return sign ? -v : v;
}

/// fp32 to bf16 bits: keep the top 16 bits, rounding the dropped 16 to nearest even.
/// NaN gives the canonical NaN 0x7FFF.
inline std::uint16_t float_to_bf16_bits(float x) {
  const std::uint32_t u = float_bits(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FFF;
  return static_cast<std::uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

/// bf16 bits to fp32 (exact).
inline float bf16_bits_to_float(std::uint16_t b) { return bits_float(static_cast<std::uint32_t>(b) << 16); }

/// `x` rounded to the nearest value of type `t` (fp32: unchanged).
inline float round_to(DType t, float x) {
  switch (t) {
    case DType::F16: return half_bits_to_float(float_to_half_bits(x));
    case DType::BF16: return bf16_bits_to_float(float_to_bf16_bits(x));
    case DType::F32: break;
  }
  return x;
}

/// fp32 to the 16-bit encoding of `t` (F16 or BF16).
inline std::uint16_t to_bits16(DType t, float x) {
  return t == DType::BF16 ? float_to_bf16_bits(x) : float_to_half_bits(x);
}
/// The 16-bit encoding of `t` (F16 or BF16) to fp32.
inline float from_bits16(DType t, std::uint16_t b) {
  return t == DType::BF16 ? bf16_bits_to_float(b) : half_bits_to_float(b);
}

}  // namespace fa
