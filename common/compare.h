/**
 * \file compare.h
 * \brief Comparing a stage's fp32 output with the float64 reference, and the one place
 *        where tolerances are defined.
 *
 * An element passes when |got − want| <= atol + rtol·|want| and got is not NaN.
 * The tolerance is not a single magic number: atol grows with the error that a plain
 * fp32 implementation of the same algorithm (the baseline in reference.h) makes on the
 * same inputs. Large-magnitude logits make fp32 itself less exact, and the tolerance
 * follows; a wrong kernel is off by far more than a few baseline errors.
 */
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

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
///@}

/// The fp32 tolerance for data whose largest |reference| is `ref_max_abs` and whose
/// fp32 baseline is off by at most `baseline_max_abs_err`.
Tolerance fp32_tolerance(double ref_max_abs, double baseline_max_abs_err);

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

/// Names an element for messages, e.g. "O[b=0,h=3,i=17,c=5]".
using IndexNamer = std::function<std::string(int64_t)>;

/// Multi-line text: the error figures, the tolerance, PASSED/FAILED, the first mismatches.
std::string describe(const Comparison& c, const IndexNamer& name);

}  // namespace fa
