/**
 * \file compare.h
 * \brief Comparing a stage's output with the float64 reference, and the one place
 *        where tolerances are defined.
 *
 * An element passes when |got − want| <= atol + rtol·|want| and got is not NaN.
 * The tolerance is not a single magic number: atol grows with the error that a plain
 * implementation of the same algorithm in the same precision (the baseline in
 * reference.h) makes on the same inputs. Large-magnitude logits make fp32 itself less
 * exact, and the tolerance follows; a wrong kernel is off by far more than a few
 * baseline errors. fp16 and bf16 outputs are held to their own baseline (fp16/bf16
 * operands, fp32 accumulation) in the same way, with a floor of one rounding of the
 * output type, as FlashAttention's own tests do.
 */
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/dtype.h"

namespace fa {

/// Element-wise tolerance: |got − want| <= atol + rtol·|want|.
struct Tolerance {
  double atol;  ///< absolute part
  double rtol;  ///< relative part
};

/// \name Tolerances (the only place they are defined)
///@{
constexpr double kFp32Rtol = 1e-4;  ///< relative part for fp32 results
constexpr double kFp32AtolFloor = 1e-5;  ///< absolute floor, as a fraction of max |reference|
constexpr double kBaselineErrorFactor = 8.0;  ///< how many times the fp32 baseline's max error is allowed
constexpr double kLowpBaselineErrorFactor = 3.0;  ///< the same for fp16/bf16 against their own baseline
///@}

/// Unit roundoff of a type (half the distance from 1 to the next value): 2^-24 for
/// fp32, 2^-11 for fp16, 2^-8 for bf16.
inline double unit_roundoff(DType t) {
  switch (t) {
    case DType::F16: return 1.0 / 2048.0;
    case DType::BF16: return 1.0 / 256.0;
    case DType::F32: break;
  }
  return 1.0 / 16777216.0;
}

/// The fp32 tolerance for data whose largest |reference| is `ref_max_abs` and whose
/// fp32 baseline is off by at most `baseline_max_abs_err`.
Tolerance fp32_tolerance(double ref_max_abs, double baseline_max_abs_err);

/// The tolerance for output of type `t` (fp32, fp16 or bf16) against the float64
/// reference, whose largest |value| is `ref_max_abs`, when the same-precision baseline
/// is off by at most `baseline_max_abs_err`. fp32: fp32_tolerance(). fp16 and bf16:
/// atol = max(3 × baseline error, one rounding of max |ref|), rtol = one rounding.
Tolerance tolerance_for(DType t, double ref_max_abs, double baseline_max_abs_err);

/// One element that failed.
struct Mismatch {
  int64_t index;  ///< flat index into the compared arrays
  double got;     ///< the stage's value
  double want;    ///< the reference value
};

/// Result of a comparison.
struct Comparison {
  int64_t count = 0;          ///< elements compared
  int64_t failures = 0;       ///< elements outside the tolerance (NaN counts)
  double max_abs_err = 0;     ///< max |got − want|
  double max_rel_err = 0;     ///< max |got − want| / |want| over elements with |want| > 1e-3·max|want|
  double rel_l2_err = 0;      ///< ‖got − want‖₂ / ‖want‖₂
  Tolerance tolerance{0, 0};  ///< what was allowed
  std::vector<Mismatch> first_mismatches;  ///< the first few failures, in index order
  bool passed() const { return failures == 0 && count > 0; }  ///< all elements within tolerance
};

/// Compares with an explicit tolerance, keeping up to `max_report` mismatches.
Comparison compare(const float* got, const double* want, int64_t n, Tolerance tol,
                   int max_report = 5);

/// Compares with the fp32 tolerance derived from `baseline` (same algorithm, fp32).
Comparison compare_fp32(const float* got, const double* want, const float* baseline,
                        int64_t n, int max_report = 5);

/// Compares with the tolerance of type `t` derived from `baseline` (same algorithm and
/// precision): tolerance_for(t, ...).
Comparison compare_with_baseline(DType t, const float* got, const double* want, const float* baseline,
                                 int64_t n, int max_report = 5);

/**
 * Compares with the fp32 tolerance derived from `baseline`, its absolute floor taken from
 * `terms_max_abs` (the largest sum of |terms| behind any element) where that exceeds the
 * reference's largest value. For sums whose terms cancel, a gradient through the softmax
 * for one, the rounding error follows the size of the terms, not of what is left of them:
 * a gradient that is exactly zero is still computed from terms that are not.
 */
Comparison compare_fp32_cancelling(const float* got, const double* want, const float* baseline, int64_t n,
                                   double terms_max_abs, int max_report = 5);

/**
 * The tolerance compare_fp32_cancelling() compares with (t = fp32), for a caller that adds to
 * it; for fp16 and bf16, tolerance_for() with the same baseline, its absolute part at least
 * the fp32 floor of the terms' size (a 16-bit backward pass accumulates its sums in fp32).
 */
Tolerance cancelling_tolerance(DType t, const double* want, const float* baseline, int64_t n, double terms_max_abs);

/// Names an element for messages, e.g. "O[b=0,h=3,i=17,c=5]".
using IndexNamer = std::function<std::string(int64_t)>;

/// Multi-line text: the error figures, the tolerance, PASSED/FAILED, the first mismatches.
std::string describe(const Comparison& c, const IndexNamer& name);

}  // namespace fa
