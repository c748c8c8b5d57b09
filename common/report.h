/**
 * \file report.h
 * \brief The one report every demo prints: human-readable or JSON.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "common/device.h"
#include "common/problem.h"
#include "common/verify.h"

namespace fa {

/// Everything a demo measured and checked.
struct RunReport {
  std::string stage;        ///< e.g. "01_naive"
  std::string title;        ///< e.g. "naive three-kernel attention"
  DeviceInfo device;        ///< where it ran
  AttentionProblem problem; ///< what it solved
  double median_ms = 0;     ///< median of the timed repeats
  int64_t warmup = 0;       ///< untimed runs before timing
  int64_t repeats = 0;      ///< timed runs
  std::size_t workspace_bytes = 0;  ///< device memory allocated beyond Q, K, V, O
  double hbm_model_bytes = 0;       ///< HBM bytes per pass by the stage's IO model (0: none given)
  bool checked = false;     ///< whether the output was compared with the reference
  AttentionCheck check;     ///< the comparison, when checked
  /// Stage-specific facts, shown as "key: value" lines and JSON string fields.
  std::vector<std::pair<std::string, std::string>> notes;
  std::vector<RunReport> compared;   ///< --compare: earlier stages on the same inputs
  std::vector<std::string> skipped;  ///< --compare: stages left out, and why

  double tflops() const;          ///< problem.flops() / time
  double effective_gbps() const;  ///< Q, K, V read once + O written once, over time
  bool passed() const { return !checked || check.passed(); }  ///< no failed check
};

/// The full human-readable report.
void print_report(std::ostream& out, const RunReport& r);
/// The report as one JSON object on one line.
void print_report_json(std::ostream& out, const RunReport& r);
/// One line: stage, PASSED/FAILED/UNCHECKED, time, TFLOP/s, shape, device.
std::string summary_line(const RunReport& r);

}  // namespace fa
