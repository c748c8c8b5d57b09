// The 16-bit types: rounding to fp16 and bf16 (nearest, ties to even; exhaustively over
// every 16-bit pattern), their .npy files, and their tolerance and baseline.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "common/compare.h"
#include "common/dtype.h"
#include "common/npy.h"
#include "common/problem.h"
#include "common/random.h"
#include "common/reference.h"
#include "tests/catch.h"

namespace {

// Every finite, non-negative 16-bit pattern of a type, in increasing order of value.
std::vector<uint16_t> finite_patterns(fa::DType t) {
  std::vector<uint16_t> out;
  const uint16_t inf = t == fa::DType::F16 ? 0x7C00 : 0x7F80;
  for (uint32_t b = 0; b < inf; ++b) out.push_back(static_cast<uint16_t>(b));
  return out;
}

}  // namespace

TEST_CASE("fp16 rounding: known values", "[dtype]") {
  using fa::float_to_half_bits;
  REQUIRE(float_to_half_bits(1.0f) == 0x3C00);
  REQUIRE(float_to_half_bits(-2.0f) == 0xC000);
  REQUIRE(float_to_half_bits(65504.0f) == 0x7BFF);                // the largest fp16
  REQUIRE(float_to_half_bits(65519.99f) == 0x7BFF);               // just below the midpoint to 2^16
  REQUIRE(float_to_half_bits(65520.0f) == 0x7C00);                // the midpoint: ties to even = inf
  REQUIRE(float_to_half_bits(std::ldexp(1.0f, -24)) == 0x0001);   // the smallest subnormal
  REQUIRE(float_to_half_bits(std::ldexp(1.0f, -25)) == 0x0000);   // half of it: ties to even = 0
  REQUIRE(float_to_half_bits(3.0e-8f) == 0x0001);                 // just above half: rounds up
  REQUIRE(float_to_half_bits(1.0f + std::ldexp(1.0f, -11)) == 0x3C00);      // tie: to even
  REQUIRE(float_to_half_bits(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3C02);  // tie: to even (up)
  REQUIRE(float_to_half_bits(std::numeric_limits<float>::infinity()) == 0x7C00);
  REQUIRE(float_to_half_bits(std::numeric_limits<float>::quiet_NaN()) == 0x7FFF);
}

TEST_CASE("bf16 rounding: known values", "[dtype]") {
  using fa::float_to_bf16_bits;
  REQUIRE(float_to_bf16_bits(1.0f) == 0x3F80);
  REQUIRE(float_to_bf16_bits(1.0f + std::ldexp(1.0f, -8)) == 0x3F80);      // tie: to even
  REQUIRE(float_to_bf16_bits(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3F82);  // tie: to even (up)
  REQUIRE(float_to_bf16_bits(3.0e38f) == 0x7F62);
  REQUIRE(float_to_bf16_bits(3.4e38f) == 0x7F80);  // rounds past the largest bf16: inf
  REQUIRE(float_to_bf16_bits(std::numeric_limits<float>::quiet_NaN()) == 0x7FFF);
}

TEST_CASE("every 16-bit value round-trips, and every midpoint rounds to even", "[dtype]") {
  for (fa::DType t : {fa::DType::F16, fa::DType::BF16}) {
    const std::vector<uint16_t> bits = finite_patterns(t);
    int bad = 0;
    for (size_t i = 0; i < bits.size(); ++i) {
      const float x = fa::from_bits16(t, bits[i]);
      if (fa::to_bits16(t, x) != bits[i] || fa::to_bits16(t, -x) != (bits[i] | 0x8000)) ++bad;
      if (i + 1 < bits.size()) {
        // Exactly halfway to the next value (exact in float): goes to the even pattern.
        const double mid = (static_cast<double>(x) + fa::from_bits16(t, bits[i + 1])) / 2;
        const uint16_t even = (bits[i] & 1) ? bits[i + 1] : bits[i];
        if (fa::to_bits16(t, static_cast<float>(mid)) != even) ++bad;
        // A hair either side goes to the nearer one.
        if (fa::to_bits16(t, std::nextafter(static_cast<float>(mid), 0.0f)) != bits[i]) ++bad;
        if (fa::to_bits16(t, std::nextafter(static_cast<float>(mid), std::numeric_limits<float>::infinity())) != bits[i + 1]) ++bad;
      }
    }
    INFO(fa::dtype_name(t));
    REQUIRE(bad == 0);
  }
}

TEST_CASE("fp16 .npy files hold '<f2'; bf16 ones hold the exact values as '<f4'", "[dtype][npy]") {
  const std::string path = (std::filesystem::temp_directory_path() / "fa_dtype_test.npy").string();
  std::vector<float> data = fa::random_uniform(64, 5, 3.0f);
  for (float& x : data) x = fa::round_to(fa::DType::F16, x);
  fa::save_npy(path, {4, 16}, data.data(), fa::DType::F16);
  REQUIRE(std::filesystem::file_size(path) == 128 + data.size() * 2);
  fa::NpyArray a = fa::load_npy(path);
  REQUIRE(a.stored == fa::DType::F16);
  REQUIRE(a.data == data);
  for (float& x : data) x = fa::round_to(fa::DType::BF16, x);
  fa::save_npy(path, {4, 16}, data.data(), fa::DType::BF16);
  a = fa::load_npy(path);
  REQUIRE(a.stored == fa::DType::F32);
  REQUIRE(a.data == data);
  std::remove(path.c_str());
}

TEST_CASE("the fp16/bf16 tolerance: a multiple of the baseline's error, floored at one rounding", "[dtype][compare]") {
  const fa::Tolerance f16 = fa::tolerance_for(fa::DType::F16, 0.5, 1e-6);
  REQUIRE(f16.atol == Approx(0.5 / 2048));  // the floor: one fp16 rounding of max |ref|
  REQUIRE(f16.rtol == Approx(1.0 / 2048));
  const fa::Tolerance b16 = fa::tolerance_for(fa::DType::BF16, 0.5, 0.01);
  REQUIRE(b16.atol == Approx(fa::kLowpBaselineErrorFactor * 0.01));
  REQUIRE(fa::tolerance_for(fa::DType::F32, 0.5, 1e-7).atol == fa::fp32_tolerance(0.5, 1e-7).atol);
}

TEST_CASE("the fp16 baseline rounds P and O, and is off by more than fp32", "[dtype][reference]") {
  const fa::AttentionProblem p = fa::make_problem(1, 2, 33, 70, 32, 0.0, false, fa::DType::F16);
  const fa::AttentionInputs in = fa::random_inputs(p, 9);
  for (float x : in.q) REQUIRE(x == fa::round_to(fa::DType::F16, x));  // the inputs are fp16 values
  const auto rows = fa::all_rows(p);
  const auto ref = fa::reference_attention(p, in.q.data(), in.k.data(), in.v.data(), rows);
  const auto b16 = fa::baseline_attention(p, in.q.data(), in.k.data(), in.v.data(), rows);
  const auto b32 = fa::baseline_attention_fp32(p, in.q.data(), in.k.data(), in.v.data(), rows);
  double e16 = 0, e32 = 0;
  for (size_t i = 0; i < ref.o.size(); ++i) {
    REQUIRE(b16.o[i] == fa::round_to(fa::DType::F16, b16.o[i]));  // O is rounded to fp16
    e16 = std::max(e16, std::fabs(b16.o[i] - ref.o[i]));
    e32 = std::max(e32, std::fabs(b32.o[i] - ref.o[i]));
  }
  REQUIRE(e16 > 10 * e32);
  REQUIRE(e16 < 1e-3);
}
