#include "common/compare.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <utility>

namespace fa {

Tolerance fp32_tolerance(double ref_max_abs, double baseline_max_abs_err) {
  const double floor = kFp32AtolFloor * std::max(ref_max_abs, 1e-30);
  return Tolerance{std::max(floor, kBaselineErrorFactor * baseline_max_abs_err), kFp32Rtol};
}

Tolerance tolerance_for(DType t, double ref_max_abs, double baseline_max_abs_err) {
  if (t == DType::F32) return fp32_tolerance(ref_max_abs, baseline_max_abs_err);
  const double u = unit_roundoff(t);
  return Tolerance{std::max(u * std::max(ref_max_abs, 1e-30), kLowpBaselineErrorFactor * baseline_max_abs_err), u};
}

Comparison compare(const float* got, const double* want, int64_t n, Tolerance tol,
                   int max_report) {
  Comparison c;
  c.count = n;
  c.tolerance = tol;
  double want_max = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isfinite(want[i])) want_max = std::max(want_max, std::fabs(want[i]));
  }
  const double rel_floor = 1e-3 * want_max;  // relative error only where it means something
  double diff2 = 0, want2 = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double g = got[i], w = want[i];
    // Equal infinities (a −inf running max, say) are exact matches, not inf − inf = NaN.
    const double err = (g == w) ? 0.0 : std::fabs(g - w);
    const bool ok = !std::isnan(g) && err <= tol.atol + tol.rtol * std::fabs(w);
    if (!ok) {
      ++c.failures;
      if (static_cast<int>(c.first_mismatches.size()) < max_report) {
        c.first_mismatches.push_back({i, g, w});
      }
    }
    if (std::isnan(err)) {
      c.max_abs_err = err;  // sticks: NaN shows in the report
    } else if (!std::isnan(c.max_abs_err)) {
      c.max_abs_err = std::max(c.max_abs_err, err);
    }
    if (std::fabs(w) > rel_floor && std::isfinite(w)) {
      c.max_rel_err = std::max(c.max_rel_err, err / std::fabs(w));
    }
    if (std::isfinite(w)) {
      diff2 += err * err;
      want2 += w * w;
    }
  }
  c.rel_l2_err = want2 > 0 ? std::sqrt(diff2 / want2) : std::sqrt(diff2);
  return c;
}

Comparison compare_fp32(const float* got, const double* want, const float* baseline,
                        int64_t n, int max_report) {
  return compare_with_baseline(DType::F32, got, want, baseline, n, max_report);
}

namespace {

// The reference's largest |value| and the baseline's largest error against it.
std::pair<double, double> reference_max_and_baseline_error(const double* want, const float* baseline, int64_t n) {
  double ref_max = 0, base_err = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(want[i])) continue;
    ref_max = std::max(ref_max, std::fabs(want[i]));
    base_err = std::max(base_err, std::fabs(static_cast<double>(baseline[i]) - want[i]));
  }
  return {ref_max, base_err};
}

}  // namespace

Comparison compare_with_baseline(DType t, const float* got, const double* want, const float* baseline,
                                 int64_t n, int max_report) {
  const auto [ref_max, base_err] = reference_max_and_baseline_error(want, baseline, n);
  return compare(got, want, n, tolerance_for(t, ref_max, base_err), max_report);
}

Tolerance cancelling_tolerance(DType t, const double* want, const float* baseline, int64_t n, double terms_max_abs) {
  const auto [ref_max, base_err] = reference_max_and_baseline_error(want, baseline, n);
  if (t == DType::F32) return fp32_tolerance(std::max(ref_max, terms_max_abs), base_err);
  Tolerance tol = tolerance_for(t, ref_max, base_err);
  tol.atol = std::max(tol.atol, kFp32AtolFloor * terms_max_abs);  // fp32 accumulation of the terms
  return tol;
}

Comparison compare_fp32_cancelling(const float* got, const double* want, const float* baseline, int64_t n,
                                   double terms_max_abs, int max_report) {
  return compare(got, want, n, cancelling_tolerance(DType::F32, want, baseline, n, terms_max_abs), max_report);
}

std::string describe(const Comparison& c, const IndexNamer& name) {
  std::ostringstream s;
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "max abs err %.3e, max rel err %.3e, rel L2 err %.3e over %lld values "
                "(allowed: %.2e + %.0e*|ref|): %s",
                c.max_abs_err, c.max_rel_err, c.rel_l2_err, static_cast<long long>(c.count),
                c.tolerance.atol, c.tolerance.rtol, c.passed() ? "PASSED" : "FAILED");
  s << buf;
  if (c.failures > 0) {
    s << "\n  " << c.failures << " value(s) outside the tolerance; first ones:";
    for (const Mismatch& m : c.first_mismatches) {
      std::snprintf(buf, sizeof buf, " got %.7g, want %.7g (diff %.3e)", m.got, m.want,
                    std::fabs(m.got - m.want));
      s << "\n    " << (name ? name(m.index) : "[" + std::to_string(m.index) + "]") << ":" << buf;
    }
  }
  return s.str();
}

}  // namespace fa
