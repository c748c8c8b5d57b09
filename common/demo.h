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
#include "common/device_buffer.h"
#include "common/errors.h"
#include "common/problem.h"

namespace fa {

/// Device pointers of one element type T.
template <typename T>
struct TypedTensors {
  const T* q;  ///< [B, H, Nq, d]
  const T* k;  ///< [B, H, Nkv, d]
  const T* v;  ///< [B, H, Nkv, d]
  T* o;        ///< [B, H, Nq, d], written by the stage
  float* lse;  ///< [B, H, Nq] log-sum-exp per query row, or null
};

/// Device pointers a stage reads and writes; their element type is `dtype`.
struct DeviceTensors {
  const void* q;  ///< [B, H, Nq, d]
  const void* k;  ///< [B, H, Nkv, d]
  const void* v;  ///< [B, H, Nkv, d]
  void* o;        ///< [B, H, Nq, d], written by the stage
  float* lse = nullptr;  ///< [B, H, Nq] log-sum-exp per query row (always fp32), for stages that write it
  DType dtype = DType::F32;  ///< element type of q, k, v and o

  /// The fp32 view that stages 01-05 take. \throws InputError if dtype is not fp32.
  TypedTensors<float> f32() const {
    if (dtype != DType::F32) throw InputError(std::string("this stage takes fp32 tensors, not ") + dtype_name(dtype));
    return {static_cast<const float*>(q), static_cast<const float*>(k), static_cast<const float*>(v),
            static_cast<float*>(o), lse};
  }
};

/// Q, K and V uploaded to the device in one element type.
struct DeviceInputs {
  DType dtype = DType::F32;        ///< element type on the device
  DeviceBuffer<unsigned char> q;   ///< Q's bytes
  DeviceBuffer<unsigned char> k;   ///< K's bytes
  DeviceBuffer<unsigned char> v;   ///< V's bytes
  /// The inputs as a stage takes them (o and lse still null).
  DeviceTensors tensors() const { return DeviceTensors{q.data(), k.data(), v.data(), nullptr, nullptr, dtype}; }
};

/// Converts host fp32 values to `t` (rounding to nearest even) and uploads them.
DeviceInputs upload_inputs(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                           DType t);

/// `n` elements of type `t` from the device, widened to float.
std::vector<float> download_as_float(const void* device_ptr, std::size_t n, DType t);

/// Enqueues one forward pass of a stage: `workspace` has the stage's workspace_bytes(p) bytes.
using StageRun = std::function<void(const AttentionProblem&, const DeviceTensors&, void* workspace)>;

/**
 * One variant of a stage's kernel: the finished kernel with one step of the stage's
 * LOG.md undone, or with another tile size, as the stage's typed configuration (its
 * tuning.h) spells it. `--variant NAME` runs it in place of the finished kernel. `Run` is
 * how the stage runs: StageRun for the forward stages.
 */
template <typename Run>
struct Variant {
  std::string name;     ///< what --variant takes, e.g. "no_prefetch"
  std::string summary;  ///< one line: how it differs from the finished kernel
  Run run;              ///< one pass of the variant
};

/// A forward stage's variant.
using StageVariant = Variant<StageRun>;

/// The help text of `--variant` for these variants: one line each.
template <typename Run>
std::string variant_help(const std::vector<Variant<Run>>& variants) {
  std::string help = "run a variant of the kernel instead of the finished one (the stage's LOG.md):";
  for (const Variant<Run>& v : variants) help += "\n" + std::string(28, ' ') + v.name + ": " + v.summary;
  return help;
}

/// The variant of `stage` called `name`. \throws UsageError naming the stage's variants if none is.
template <typename Run>
const Variant<Run>& find_variant(const std::vector<Variant<Run>>& variants, const std::string& name,
                                 const std::string& stage) {
  std::string list;
  for (const Variant<Run>& v : variants) {
    if (v.name == name) return v;
    list += (list.empty() ? "" : ", ") + v.name;
  }
  throw UsageError("--variant: stage " + stage + " has no variant '" + name + "'" +
                   (list.empty() ? std::string(" (it has none)") : " (its variants: " + list + ")"));
}

/// What a stage tells the driver about itself.
struct StageDemo {
  std::string id;     ///< "01_naive": the stage's folder name
  std::string title;  ///< "naive three-kernel attention"
  bool supports_causal = true;  ///< false: --causal is refused with a clear message
  /// Element types the stage runs in; the first is the demo's default --dtype.
  std::vector<DType> dtypes = {DType::F32};
  bool writes_lse = false;      ///< true: the stage writes each row's log-sum-exp, and it is checked
  /// Head dims the stage runs; empty: every one of supported_head_dims().
  std::vector<int64_t> head_dims;
  /// Device bytes the stage needs beyond Q, K, V, O (allocated by the driver, untimed).
  std::function<std::size_t(const AttentionProblem&)> workspace_bytes;
  /// Enqueues one forward pass. `workspace` has workspace_bytes(p) bytes.
  StageRun run;
  /// Stage-specific report lines ("key", "value"), e.g. the size of the N×N buffer.
  std::function<std::vector<std::pair<std::string, std::string>>(const AttentionProblem&)> notes;
  /// HBM bytes one forward pass moves according to the stage's IO model (optional).
  std::function<double(const AttentionProblem&)> hbm_bytes;
  /// Earlier stages that `--compare` runs on the same inputs, for a side-by-side table.
  std::vector<StageDemo> compare_with;
  /// The variants `--variant` may pick (empty: the stage has none, and no such flag).
  std::vector<StageVariant> variants;

  /// Whether the stage can run this problem's mask.
  bool causal_ok(const AttentionProblem& p) const { return supports_causal || !p.causal; }
  /// Whether the stage runs in element type `t`.
  bool runs_in(DType t) const;
  /// Whether the stage runs head dim `d` (one the project supports).
  bool runs_dim(int64_t d) const;
  /// \throws InputError naming the head dims the stage runs, if it does not run p.dim.
  void require_dim(const AttentionProblem& p) const;
};

struct AttentionInputs;
struct DeviceInfo;
struct RunReport;

/**
 * Q, K and V from DIR/q.npy, k.npy and v.npy, checked against each other: each
 * [B, H, N, d], K and V alike, B, H and d agreeing. `*p` gets the files' shape with `scale`,
 * `causal` and its own dtype, to which the values are rounded.
 * \throws InputError naming the file and what is wrong with it.
 */
AttentionInputs load_npy_inputs(const std::string& dir, double scale, bool causal, AttentionProblem* p);

/// A tensor to save: its file name without `.npy`, and its values, [B, H, Nq, d] or [B, H, Nkv, d].
using NamedTensor = std::pair<std::string, const std::vector<float>*>;

/// Writes each tensor as DIR/NAME.npy in p.dtype, shaped by its size as Nq or Nkv rows a
/// head (the two agree when their sizes do), creating DIR. \throws InputError on failure.
void save_npy_tensors(const std::string& dir, const AttentionProblem& p, const std::vector<NamedTensor>& tensors);

/// The element type `--dtype` names for `stage` (empty: the stage's default).
/// \throws InputError naming the types the stage supports.
DType stage_dtype(const StageDemo& stage, const std::string& dtype_flag);

/**
 * `stage` running variant `name` instead of its finished kernel: its run replaced, its id
 * suffixed ("07_memory_pipeline:no_prefetch") and its notes saying what the variant is.
 * \throws UsageError naming the stage's variants if it has none called `name`.
 */
StageDemo with_variant(const StageDemo& stage, const std::string& name);

/// Device bytes one run of `stage` allocates besides Q, K and V: O, its workspace, its lse.
std::size_t stage_run_bytes(const StageDemo& stage, const AttentionProblem& p);

/**
 * Runs one stage on inputs already on the device (`inputs`: Q, K, V of type p.dtype;
 * `in`: their host copies, for the check): one run on a poisoned output, checked against the float64
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
