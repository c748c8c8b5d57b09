#include "common/backward_demo.h"

#include <cuda_runtime.h>

#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/cli.h"
#include "common/cuda_check.h"
#include "common/device.h"
#include "common/device_buffer.h"
#include "common/errors.h"
#include "common/npy.h"
#include "common/random.h"
#include "common/reference.h"
#include "common/report.h"
#include "common/timer.h"
#include "common/verify.h"

namespace fa {
namespace {

std::string fixed(double x, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, x);
  return buf;
}

// One training step's attention: the forward stage's pass, then the backward stage's on a
// random dO (or Q, K, V and dO loaded from .npy files).
class BackwardDemo final : public Demo {
 public:
  explicit BackwardDemo(const BackwardStageDemo& stage) : stage_(stage), backward_(stage.run) {}

  std::string id() const override { return stage_.id; }
  std::string about() const override { return stage_.about; }
  void set_defaults(DemoOptions& o) const override { o.dtype = dtype_name(stage_.dtypes.front()); }
  // Whole heads are checked, not rows (--check-heads).
  std::vector<std::string> left_out_flags() const override { return {"check-rows"}; }
  void add_flags(ArgParser& a) override {
    std::string types;
    for (std::size_t i = 0; i < stage_.dtypes.size(); ++i) {
      types += (i == 0 ? "" : (i + 1 == stage_.dtypes.size() ? " or " : ", ")) + std::string(dtype_name(stage_.dtypes[i]));
    }
    a.reword("dtype", "element type: " + types + (stage_.dtypes.size() == 1 ? " (the only one this stage runs)" : ""));
    a.reword("seed", "seed of the random inputs and dO");
    a.reword("magnitude", "Q, K, V are uniform in [-X, X] (dO in [-1, 1])");
    a.reword("compare", "also time the forward pass (" + stage_.forward_name + ") on the same inputs");
    a.reword("dry-run", "check the shape and say what it needs, run nothing");
    a.reword("load", "read q.npy, k.npy, v.npy, do.npy from DIR (sets the shape)");
    a.reword("save", "write q, k, v, o, do, dq, dk, dv as .npy files to DIR");
    a.add_int("check-heads", &check_heads_, "most heads to check, whole (spread over all batches and heads)");
  }
  std::string variant_help() const override { return stage_.variants.empty() ? "" : fa::variant_help(stage_.variants); }

  std::optional<int> setup(const DemoOptions& o, const ArgParser& a) override {
    opt_ = o;
    backward_ = pick_variant(stage_.variants, o.variant, id(), stage_.run, &variant_);
    checks_.id = stage_.id;  // the driver's checks of --dtype and --dim, with their messages
    checks_.dtypes = stage_.dtypes;
    checks_.head_dims = stage_.head_dims;
    dtype_ = stage_dtype(checks_, o.dtype);
    if (!o.load_dir.empty()) {
      for (const char* f : {"batch", "heads", "seq-q", "seq-kv", "dim", "seed", "magnitude"}) {
        if (a.given(f)) throw UsageError(std::string("--") + f + " cannot be combined with --load");
      }
    } else {
      if (o.dim > 0) checks_.require_dim(o.dim);  // before make_problem's: it names the stage's dims
      p_ = make_problem(o.batch, o.heads, o.seq_q, o.seq_kv, o.dim, o.scale, o.causal, dtype_);
    }
    return std::nullopt;
  }

  DemoFootprint footprint(const DeviceInfo& device) override {
    if (!opt_.load_dir.empty()) {  // Q, K, V and dO from the files; the shape comes from them
      p_.dtype = dtype_;  // the values are rounded to it
      in_ = load_npy_inputs(opt_.load_dir, opt_.scale, opt_.causal, &p_);
      checks_.require_dim(p_.dim);
      NpyArray g = load_npy(opt_.load_dir + "/do.npy");
      if (g.shape != std::vector<int64_t>{p_.batch, p_.heads, p_.seq_q, p_.dim}) {
        throw InputError("do.npy must have the shape of q.npy");
      }
      d_o_ = std::move(g.data);
      for (float& e : d_o_) e = round_to(dtype_, e);
    }
    // Q, O, dO, dQ are [B, H, Nq, d]; K, V, dK, dV [B, H, Nkv, d]; the lse one float a row.
    const std::size_t tensors = 4 * static_cast<std::size_t>(p_.q_elems() + p_.kv_elems()) * dtype_bytes(p_.dtype);
    const std::size_t rows = static_cast<std::size_t>(p_.rows()) * sizeof(float) + stage_.workspace_bytes(p_);
    DemoFootprint f;
    f.shape = describe(p_);
    f.device_bytes = tensors + rows;
    f.what = "Q, K, V, O, dO, dQ, dK, dV " + format_bytes(static_cast<double>(tensors)) + " + lse and workspace " +
             format_bytes(static_cast<double>(rows));
    f.plan = "storing P would add " + format_bytes(stored_p_bytes());
    // The backward passes (one checked, then warm-up and timed) and the forward passes
    // (one, and as many again timed with --compare), at the forward's conservative rate.
    const double rate = conservative_flops_per_second(device);
    const int64_t runs = 1 + opt_.warmup + opt_.repeats;
    const double flops = static_cast<double>(runs) * stage_.flops(p_) +
                         static_cast<double>(opt_.compare ? 1 + runs : 1) * p_.flops();
    f.estimate_s = flops / rate;
    f.estimate_basis = std::to_string(runs) + " backward passes of " + fixed(stage_.flops(p_), 0) +
                       " FLOP at a conservative " + fixed(rate / 1e9, 2) + " GFLOP/s for this device";
    f.shorter = "--repeats 1 --warmup 0, or a smaller --seq-q, --seq-kv, --batch or --heads.";
    return f;
  }

  RunReport run(const DeviceInfo& device) override {
    if (opt_.load_dir.empty()) {
      in_ = random_inputs(p_, opt_.seed, static_cast<float>(opt_.magnitude));  // rounded to p_.dtype
      d_o_ = random_output_gradient(p_, opt_.seed);
      for (float& e : d_o_) e = round_to(p_.dtype, e);
    }
    const DType t = p_.dtype;
    const std::size_t bytes = dtype_bytes(t);
    const auto q_n = static_cast<std::size_t>(p_.q_elems()), kv_n = static_cast<std::size_t>(p_.kv_elems());
    const DeviceInputs inputs = upload_inputs(in_.q, in_.k, in_.v, t);
    const DeviceInputs grad_out = upload_inputs(d_o_, {}, {}, t);  // dO, in the stage's type
    DeviceBuffer<unsigned char> out(q_n * bytes), dq(q_n * bytes), dk(kv_n * bytes), dv(kv_n * bytes);
    DeviceBuffer<float> lse(static_cast<std::size_t>(p_.rows()));
    DeviceBuffer<unsigned char> stats(stage_.stats_bytes * static_cast<std::size_t>(p_.rows()));
    void* const stats_ptr = stage_.stats_bytes ? stats.data() : nullptr;
    const std::size_t workspace = stage_.workspace_bytes(p_);
    DeviceBuffer<unsigned char> ws(workspace);

    // The forward pass that training runs first: O and the lse the backward pass starts from.
    const auto forward = [&] {
      stage_.forward(p_, inputs.q.data(), inputs.k.data(), inputs.v.data(), out.data(), lse.data(), stats_ptr);
    };
    forward();
    for (auto* b : {&dq, &dk, &dv}) b->fill_bytes(kPoisonByte);  // never written stays NaN and fails
    const auto backward = [&] {
      backward_(p_,
                {inputs.q.data(), inputs.k.data(), inputs.v.data(), out.data(), grad_out.q.data(), lse.data(),
                 dq.data(), dk.data(), dv.data(), stats_ptr},
                ws.data());
    };
    backward();
    FA_CUDA_CHECK(cudaDeviceSynchronize());
    const AttentionGradients<float> got{download_as_float(dq.data(), q_n, t), download_as_float(dk.data(), kv_n, t),
                                        download_as_float(dv.data(), kv_n, t)};

    RunReport r;
    r.stage = opt_.variant.empty() ? id() : id() + ":" + opt_.variant;
    r.title = stage_.title;
    r.device = device;
    r.shape = describe(p_);
    r.dtype = t;
    r.fields = problem_fields(p_);
    r.fields.push_back({"flops", stage_.flops(p_)});
    r.fields.push_back({"stored_p_bytes", static_cast<int64_t>(stored_p_bytes())});
    r.workspace_bytes = workspace;
    r.hbm_model_bytes = stage_.hbm_bytes(p_);
    if (!variant_.empty()) r.notes.push_back({"variant", variant_});
    // The stage describes its finished kernel's tiles; a variant may choose others.
    r.notes.push_back({"tiles", (variant_.empty() ? "" : "the finished kernel's: ") + stage_.tiles(p_)});
    r.notes.push_back({"memory", "the workspace holds " + stage_.workspace_what + "; storing P would need " +
                                     format_bytes(stored_p_bytes())});
    if (opt_.check) {
      const GradientCheck check =
          check_attention_backward(p_, in_, d_o_, got, sample_indices(p_.batch_heads(), check_heads_));
      r.checked = true;
      r.checked_what = std::to_string(check.heads.size()) + " of " + std::to_string(p_.batch_heads()) + " heads, whole,";
      r.checked_count = {"heads_checked", static_cast<int64_t>(check.heads.size())};
      r.checks.push_back({"dQ", check.dq, gradient_namer(p_, check.heads, "dQ")});
      r.checks.push_back({"dK", check.dk, gradient_namer(p_, check.heads, "dK")});
      r.checks.push_back({"dV", check.dv, gradient_namer(p_, check.heads, "dV")});
    }
    if (!opt_.save_dir.empty()) {
      const std::vector<float> o_host = download_as_float(out.data(), q_n, t);
      save_npy_tensors(opt_.save_dir, p_, {{"q", &in_.q}, {"k", &in_.k}, {"v", &in_.v}, {"o", &o_host},
                                           {"do", &d_o_}, {"dq", &got.dq}, {"dk", &got.dk}, {"dv", &got.dv}});
    }

    const int warmup = static_cast<int>(opt_.warmup), repeats = static_cast<int>(opt_.repeats);
    r.median_ms = time_device(backward, warmup, repeats).median_ms();
    r.warmup = opt_.warmup;
    r.repeats = opt_.repeats;
    r.metrics.push_back(rate_metric(device, "tflops", stage_.flops(p_) / (r.median_ms * 1e-3) / 1e12, "TFLOP/s",
                                    "throughput", "(counting 2.5x the forward's FLOPs)", true));
    if (opt_.compare) {
      const double forward_ms = time_device(forward, warmup, repeats).median_ms();
      Metric m;
      m.key = "forward_ms";
      m.value = forward_ms;
      m.unit = "ms";
      m.label = "forward";
      m.note = "for " + stage_.forward_name + "'s forward pass on the same inputs: the backward pass takes " +
               fixed(r.median_ms / forward_ms, 2) + "x as long";
      m.digits = 3;
      r.metrics.push_back(m);
    }
    return r;
  }

 private:
  // What storing P, one element per (row, key) of every head, would take: what the stage does without.
  double stored_p_bytes() const {
    return static_cast<double>(p_.batch_heads()) * static_cast<double>(p_.seq_q) * static_cast<double>(p_.seq_kv) *
           static_cast<double>(dtype_bytes(p_.dtype));
  }

  const BackwardStageDemo stage_;
  StageDemo checks_;           // the stage's types and head dims, for the driver's checks of --dtype and --dim
  int64_t check_heads_ = 2;    // --check-heads
  BackwardStageRun backward_;  // the finished pass or a --variant's
  std::string variant_;        // the --variant's name and summary, if one was given
  DType dtype_ = DType::F32;
  DemoOptions opt_;
  AttentionProblem p_;
  AttentionInputs in_;
  std::vector<float> d_o_;
};

}  // namespace

int run_backward_demo(int argc, const char* const* argv, const BackwardStageDemo& stage) {
  BackwardDemo demo(stage);
  return run_demo(argc, argv, demo);
}

}  // namespace fa
