/**
 * \file report.h
 * \brief The one report every demo prints, human-readable or JSON: what ran, where, on
 *        what shape, its time, its named metrics and its named checks.
 *
 * A demo fills a RunReport and the driver (common/demo.h) prints it; the report knows no
 * stage. The text report reads
 * \code
 * stage 09_split_kv_decoding: decoding with a split KV cache, merged by stage 02's rule
 *   device      NVIDIA H100 80GB HBM3 (sm_90, 132 SMs)
 *   shape       B=1 Hq=32 Hkv=32 Nq=1 L=32768 d=128 fp16
 *   plan        ...                           <- the stage's notes
 *   workspace   ...
 *   time        median 0.283 ms over 20 runs (3 warm-up)
 *   bandwidth   2.970 TB/s of K and V read    <- its metrics
 *   check       64 of 32 query rows against the float64 CPU reference
 *   O           ...                           <- its checks, by name
 *   lse         ...
 * 09_split_kv_decoding: PASSED  0.283 ms  2.97 TB/s  [shape]  [GPU: ...]
 * \endcode
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "common/compare.h"
#include "common/device.h"
#include "common/problem.h"

namespace fa {

/// One output compared with the float64 reference, under its name: "O", "lse", "dK".
struct NamedCheck {
  std::string name;   ///< what was compared
  Comparison result;  ///< how it compared
  IndexNamer namer;   ///< names element k in the report ("dK[b=0,h=1,j=5,c=3]")
  bool passed() const { return result.passed(); }  ///< every element within tolerance
};

/// One figure a demo reports besides its time: a rate, a time of something else.
struct Metric {
  std::string key;              ///< its JSON key: "tflops", "tbps", "forward_ms"
  std::optional<double> value;  ///< none where it means nothing (a GPU rate on the CPU backend)
  std::string unit;             ///< written after the value: "TFLOP/s"
  std::string label;            ///< its line in the text report: "throughput"
  std::string note;             ///< written after value and unit: "(4*B*H*Nq*Nkv*d)"
  int digits = 2;               ///< decimals in the text report
  bool headline = false;        ///< also in the one-line summary and the --compare table
};

/// A value of the JSON report: a flag, a count, a real or a word.
using JsonScalar = std::variant<bool, int64_t, double, std::string>;

/// Everything a demo measured and checked.
struct RunReport {
  std::string stage;        ///< e.g. "01_naive", or "07_memory_pipeline:no_prefetch" for a variant
  std::string title;        ///< e.g. "naive three-kernel attention"
  DeviceInfo device;        ///< where it ran
  std::string shape;        ///< the problem in one line, as describe() gives it
  DType dtype = DType::F32; ///< the element type it ran in
  /// The problem and the stage's plan as JSON fields ("batch": 4, "splits": 8, ...).
  std::vector<std::pair<std::string, JsonScalar>> fields;
  double median_ms = 0;     ///< median of the timed repeats
  int64_t warmup = 0;       ///< untimed runs before timing
  int64_t repeats = 0;      ///< timed runs
  std::size_t workspace_bytes = 0;  ///< device memory allocated beyond the inputs and outputs
  double hbm_model_bytes = 0;       ///< HBM bytes per pass by the stage's IO model (0: none given)
  /// Stage-specific facts, shown as "key value" lines, and in JSON as the object "notes".
  std::vector<std::pair<std::string, std::string>> notes;
  std::vector<Metric> metrics;  ///< figures besides the time, in the order they are shown
  bool checked = false;         ///< whether the outputs were compared with the reference
  /// What was checked, for the text report: "64 of 1024 query rows", "2 of 8 heads, whole".
  std::string checked_what;
  /// The same as a JSON count: {"rows_checked", 64}.
  std::pair<std::string, int64_t> checked_count;
  std::vector<NamedCheck> checks;    ///< each output compared, when checked
  std::vector<RunReport> compared;   ///< --compare: other stages on the same inputs
  std::vector<std::string> skipped;  ///< --compare: stages left out, and why

  /// No check failed, here and in every compared stage.
  bool passed() const;
  /// The check called `name`, or null.
  const NamedCheck* check(const std::string& name) const;
  /// The metric with JSON key `key`, or null.
  const Metric* metric(const std::string& key) const;
  /// "PASSED", "FAILED" (a check of this stage failed) or "UNCHECKED".
  const char* verdict() const;
};

/// The full human-readable report, the --compare table included.
void print_report(std::ostream& out, const RunReport& r);
/// The report as one JSON object on one line, then one line for each compared stage.
void print_report_json(std::ostream& out, const RunReport& r);
/// One line: stage, PASSED/FAILED/UNCHECKED, time, headline metrics, shape, device, then
/// each compared stage's verdict and time.
std::string summary_line(const RunReport& r);

}  // namespace fa
