/**
 * \file demo.h
 * \brief The driver every stage's demo calls: command line, inputs, run, check,
 *        timing and report, so a stage's demo only says what is special about it.
 */
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/block_mask.h"
#include "common/cli.h"
#include "common/device_buffer.h"
#include "common/errors.h"
#include "common/problem.h"
#include "common/report.h"

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

/**
 * What runs for `--variant name` of `stage`: `finished` when `name` is empty, else that
 * variant's run, with "name: summary" in *note for the report.
 * \throws UsageError naming the stage's variants if it has none called `name`.
 */
template <typename Run>
Run pick_variant(const std::vector<Variant<Run>>& variants, const std::string& name, const std::string& stage,
                 Run finished, std::string* note) {
  if (name.empty()) return finished;
  const Variant<Run>& v = find_variant(variants, name, stage);
  *note = v.name + ": " + v.summary;
  return v.run;
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
  /// Block-sparse attention (common/block_mask.h), if the stage runs it: blocks of
  /// block_q × block_kv, and a forward pass given the mask's flags in device memory. The demo
  /// then takes --block-density.
  struct BlockSparse {
    int64_t block_q = 0;   ///< query rows of a mask block
    int64_t block_kv = 0;  ///< keys of a mask block
    /// Enqueues one forward pass under the mask `flags` (⌈Nq/block_q⌉·⌈Nkv/block_kv⌉ of them).
    std::function<void(const AttentionProblem&, const DeviceTensors&, const uint8_t* flags)> run;
  };
  std::optional<BlockSparse> block_sparse;  ///< empty: the stage runs dense attention only
  /// Masks beyond the causal one (common/block_mask.h: sliding windows, packed documents,
  /// block masks), if the stage runs them. The demo then takes --window-left, --window-right,
  /// --docs and --block-density.
  struct Masked {
    int64_t block_q = 0;   ///< query rows of a block of --block-density's mask
    int64_t block_kv = 0;  ///< keys of a block of --block-density's mask
    /// The stage as it runs p under `mask`: its run (what that needs besides, such as tables
    /// of the blocks to compute, made here, once, and not timed) and its notes.
    std::function<StageDemo(const StageDemo&, const AttentionProblem& p, const Mask& mask)> apply;
  };
  std::optional<Masked> masked;  ///< empty: the stage runs no masks but the causal one

  /// Whether the stage can run this problem's mask.
  bool causal_ok(const AttentionProblem& p) const { return supports_causal || !p.causal; }
  /// Whether the stage runs in element type `t`.
  bool runs_in(DType t) const;
  /// Whether the stage runs head dim `d` (one the project supports).
  bool runs_dim(int64_t d) const;
  /// \throws InputError naming the head dims the stage runs, if it does not run `d`.
  void require_dim(int64_t d) const;
};

struct AttentionInputs;
struct DecodeProblem;

/// The JSON fields of an attention problem: batch, heads, seq_q, seq_kv, dim, scale, causal, qkvo_bytes.
std::vector<std::pair<std::string, JsonScalar>> problem_fields(const AttentionProblem& p);

/// The same for a decoding problem: batch, q_heads, kv_heads, seq_q, max_seq_kv, total_kv, dim, scale, causal.
std::vector<std::pair<std::string, JsonScalar>> problem_fields(const DecodeProblem& p);

/// A rate for the report: `value` on a GPU, none on the CPU backend (whose timings are not GPU
/// performance) or where it is not finite (no timed run).
Metric rate_metric(const DeviceInfo& device, const std::string& key, double value, const std::string& unit,
                   const std::string& label, const std::string& note, bool headline, int digits = 2);

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
 * reference on `opt.check_rows` rows when `opt.check` (checks "O" and, if the stage writes it,
 * "lse"), then `opt.warmup` untimed and `opt.repeats` timed runs. Allocates the stage's output
 * and workspace itself; the caller makes sure stage_run_bytes() fit. With warmup = repeats = 0
 * the stage runs exactly once (what a profiler wants). `out_host`, if given, receives O.
 * With `mask`, `stage` runs masked attention under it (its run takes the mask itself): the
 * check is against the masked reference, and the throughput counts the FLOPs the mask leaves
 * (Mask::work_fraction()).
 */
RunReport measure_stage(const StageDemo& stage, const AttentionProblem& p, const AttentionInputs& in,
                        const DeviceTensors& inputs, const DeviceInfo& device, const DemoOptions& opt,
                        std::vector<float>* out_host = nullptr, const Mask* mask = nullptr);

/// What a demo's run will allocate and may take, known once the device is.
struct DemoFootprint {
  std::string shape;             ///< the problem in one line
  std::size_t device_bytes = 0;  ///< everything the run allocates on the device
  std::string what;              ///< those bytes explained, for the message when they do not fit
  std::string plan;              ///< what --dry-run adds after the bytes ("storing P would add 2.00 GiB")
  double estimate_s = 0;         ///< a conservative estimate of the whole run's seconds (0: none made)
  std::string estimate_basis;    ///< what the estimate counts ("1.1e+12 FLOP per pass, 24 passes ...")
  std::string shorter;           ///< how to make a long run shorter
};

/**
 * One stage's demo as the shared driver (run_demo()) runs it. The driver owns the command
 * line, the order of the steps and the report; the demo says what is special about its
 * stage. The steps, in order:
 *  1. add_flags(): the demo's own flags (and rewording of the shared ones);
 *  2. setup(): the command line checked and the problem built, before any device is touched,
 *     so that bad input fails the same way with or without a GPU;
 *  3. footprint(): once the device is known, what the run needs; the driver refuses a run
 *     that does not fit, warns of one that may take long, and stops here for --dry-run;
 *  4. run(): inputs made, outputs poisoned, one run checked against the float64 reference,
 *     the timed runs: the RunReport, which the driver prints as text, one line or JSON, and
 *     whose checks decide the exit code.
 */
class Demo {
 public:
  virtual ~Demo() = default;
  /// The stage's folder name: "09_split_kv_decoding".
  virtual std::string id() const = 0;
  /// The help text's paragraph under the program's name.
  virtual std::string about() const = 0;
  /// Sets the demo's own defaults on `opt`, which holds default_demo_options() (a demo may
  /// choose another shape, another dtype).
  virtual void set_defaults(DemoOptions& opt) const { (void)opt; }
  /// The shared flags that mean nothing for this demo ("load", "check-rows").
  virtual std::vector<std::string> left_out_flags() const { return {}; }
  /// Adds the demo's own flags to `parser` and rewords shared ones whose meaning it widens.
  virtual void add_flags(ArgParser& parser) { (void)parser; }
  /// The help text of --variant, or empty where the stage has no variants (and no such flag).
  virtual std::string variant_help() const { return ""; }
  /**
   * Checks the command line (`opt`, and `parser` for what was given) and builds the problem.
   * \returns an exit code when the command asked for something the demo has now done
   *          instead of a measured run (stage 02's --trace); nothing otherwise.
   * \throws UsageError or InputError naming what is wrong.
   */
  virtual std::optional<int> setup(const DemoOptions& opt, const ArgParser& parser) = 0;
  /// What the run will need on `device` (the demo reads files it was told to load here).
  virtual DemoFootprint footprint(const DeviceInfo& device) = 0;
  /// Runs, checks and times the stage on `device`.
  virtual RunReport run(const DeviceInfo& device) = 0;
};

/**
 * Runs a demo: parses the command line, sets it up, checks that it fits before anything is
 * allocated, runs it, prints the report (--json, --brief or text).
 * \returns the process exit code (fa::ExitCode): kExitCheckFailed if any check failed; never throws.
 */
int run_demo(int argc, const char* const* argv, Demo& demo);

/**
 * The demo of an attention stage, 01 to 08, through run_demo(): random (or loaded) inputs,
 * O poisoned, one run checked against the float64 reference, warm-up + repeats timed,
 * `--compare` with the stage's compare_with, `--variant` with its variants.
 * \returns the process exit code (fa::ExitCode); never throws.
 */
int run_stage_demo(int argc, const char* const* argv, const StageDemo& stage);

/**
 * Runs `body` (a demo's main work) and turns any exception into a message on stderr
 * and the matching exit code (fa::ExitCode). \returns body's result, or that code.
 */
int run_guarded(const char* program, const std::function<int()>& body);

}  // namespace fa
