/**
 * \file demo.h
 * \brief The driver every stage's demo calls: command line, inputs, run, check,
 *        timing and report, so a stage's demo only says what is special about it.
 */
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "common/cli.h"
#include "common/problem.h"

namespace fa {

/// Device pointers a stage reads and writes.
struct DeviceTensors {
  const float* q;  ///< [B, H, Nq, d]
  const float* k;  ///< [B, H, Nkv, d]
  const float* v;  ///< [B, H, Nkv, d]
  float* o;        ///< [B, H, Nq, d], written by the stage
  float* lse = nullptr;  ///< [B, H, Nq] log-sum-exp per query row, for stages that write it
};

/// What a stage tells the driver about itself.
struct StageDemo {
  std::string id;     ///< "01_naive": the stage's folder name
  std::string title;  ///< "naive three-kernel attention"
  bool supports_causal = true;  ///< false: --causal is refused with a clear message
  bool writes_lse = false;      ///< true: the stage writes each row's log-sum-exp, and it is checked
  /// Device bytes the stage needs beyond Q, K, V, O (allocated by the driver, untimed).
  std::function<std::size_t(const AttentionProblem&)> workspace_bytes;
  /// Enqueues one forward pass. `workspace` has workspace_bytes(p) bytes.
  std::function<void(const AttentionProblem&, const DeviceTensors&, void* workspace)> run;
  /// Stage-specific report lines ("key", "value"), e.g. the size of the N×N buffer.
  std::function<std::vector<std::pair<std::string, std::string>>(const AttentionProblem&)> notes;
  /// HBM bytes one forward pass moves according to the stage's IO model (optional).
  std::function<double(const AttentionProblem&)> hbm_bytes;
  /// Earlier stages that `--compare` runs on the same inputs, for a side-by-side table.
  std::vector<StageDemo> compare_with;

  /// Whether the stage can run this problem's mask.
  bool causal_ok(const AttentionProblem& p) const { return supports_causal || !p.causal; }
};

struct AttentionInputs;
struct DeviceInfo;
struct RunReport;

/// Device bytes one run of `stage` allocates besides Q, K and V: O, its workspace, its lse.
std::size_t stage_run_bytes(const StageDemo& stage, const AttentionProblem& p);

/**
 * Runs one stage on inputs already on the device (`inputs`: Q, K, V; `in`: their host
 * copies, for the check): one run on a poisoned output, checked against the float64
 * reference on `opt.check_rows` rows when `opt.check`, then `opt.warmup` untimed and
 * `opt.repeats` timed runs. Allocates the stage's output and workspace itself; the
 * caller makes sure stage_run_bytes() fit. With warmup = repeats = 0 the stage runs
 * exactly once (what a profiler wants). `out_host`, if given, receives O.
 */
RunReport measure_stage(const StageDemo& stage, const AttentionProblem& p, const AttentionInputs& in,
                        const DeviceTensors& inputs, const DeviceInfo& device, const DemoOptions& opt,
                        std::vector<float>* out_host = nullptr);

/**
 * Runs a stage's demo: parses the command line, builds random (or loaded) inputs,
 * checks that everything fits before allocating, poisons O, runs once and checks the
 * result against the float64 reference, times warm-up + repeats, prints the report.
 * \returns the process exit code (fa::ExitCode); never throws.
 */
int run_stage_demo(int argc, const char* const* argv, const StageDemo& stage);

/**
 * Runs `body` (a demo's main work) and turns any exception into a message on stderr
 * and the matching exit code (fa::ExitCode). \returns body's result, or that code.
 */
int run_guarded(const char* program, const std::function<int()>& body);

}  // namespace fa
