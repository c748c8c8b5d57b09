/**
 * \file stages/10_backward/demo.cpp
 * \brief Stage 10's demo: one training step's attention, forward (stage 05) then
 *        backward (this stage), the gradients checked against the float64 reference.
 *
 * \code
 * stage10_backward                                  # B=4 H=32 N=4096 d=64, dO random
 * stage10_backward --causal --dim 128
 * stage10_backward --compare                        # beside the forward pass's own time
 * stage10_backward --variant late_load              # one step of LOG.md undone
 * stage10_backward --save out/ && stage10_backward --load out/   # q, k, v, do in; o, dq, dk, dv out
 * \endcode
 */
#include <cuda_runtime.h>

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "common/cli.h"
#include "common/cuda_check.h"
#include "common/demo.h"
#include "common/device.h"
#include "common/device_buffer.h"
#include "common/errors.h"
#include "common/npy.h"
#include "common/random.h"
#include "common/reference.h"
#include "common/report.h"
#include "common/timer.h"
#include "common/verify.h"
#include "stages/05_flash2/flash2_attention.h"
#include "stages/10_backward/backward_attention.h"
#include "stages/10_backward/tuning.h"

namespace {

std::string fixed(double x, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, x);
  return buf;
}

// One training step's attention: stage 05's forward pass, then this stage's backward pass
// on a random dO (or Q, K, V and dO loaded from .npy files).
class BackwardDemo final : public fa::Demo {
 public:
  std::string id() const override { return "10_backward"; }
  std::string about() const override {
    return "the backward pass, dQ, dK and dV recomputed from the forward's log-sum-exp.\n"
           "Runs stage 05's forward pass and then this stage on random (or loaded) inputs and a random dO, "
           "checks the gradients against a float64 CPU reference and reports the backward pass's median time.";
  }
  void set_defaults(fa::DemoOptions& o) const override { o.dtype = "fp32"; }
  // Whole heads are checked, not rows (--check-heads).
  std::vector<std::string> left_out_flags() const override { return {"check-rows"}; }
  void add_flags(fa::ArgParser& a) override {
    a.reword("dtype", "element type: fp32 (the only one this stage runs)");
    a.reword("seed", "seed of the random inputs and dO");
    a.reword("magnitude", "Q, K, V are uniform in [-X, X] (dO in [-1, 1])");
    a.reword("compare", "also time the forward pass (stage 05) on the same inputs");
    a.reword("dry-run", "check the shape and say what it needs, run nothing");
    a.reword("load", "read q.npy, k.npy, v.npy, do.npy from DIR (sets the shape)");
    a.reword("save", "write q, k, v, o, do, dq, dk, dv as .npy files to DIR");
    a.add_int("check-heads", &check_heads_, "most heads to check, whole (spread over all batches and heads)");
  }
  std::string variant_help() const override { return fa::variant_help(variants_); }

  std::optional<int> setup(const fa::DemoOptions& o, const fa::ArgParser& a) override {
    opt_ = o;
    backward_ = fa::pick_variant(variants_, o.variant, id(), backward_, &variant_);
    fa::DType dtype;
    if (!fa::parse_dtype(o.dtype, &dtype)) {
      throw fa::UsageError("--dtype: unknown type '" + o.dtype + "' (the types: fp32, fp16, bf16)");
    }
    if (dtype != fa::DType::F32) {
      throw fa::InputError(std::string("stage 10_backward runs in fp32 only, not ") + fa::dtype_name(dtype));
    }
    if (!o.load_dir.empty()) {
      for (const char* f : {"batch", "heads", "seq-q", "seq-kv", "dim", "seed", "magnitude"}) {
        if (a.given(f)) throw fa::UsageError(std::string("--") + f + " cannot be combined with --load");
      }
    } else {
      p_ = fa::make_problem(o.batch, o.heads, o.seq_q, o.seq_kv, o.dim, o.scale, o.causal);
    }
    return std::nullopt;
  }

  fa::DemoFootprint footprint(const fa::DeviceInfo& device) override {
    if (!opt_.load_dir.empty()) {  // Q, K, V and dO from the files; the shape comes from them
      in_ = fa::load_npy_inputs(opt_.load_dir, opt_.scale, opt_.causal, &p_);
      fa::NpyArray g = fa::load_npy(opt_.load_dir + "/do.npy");
      if (g.shape != std::vector<int64_t>{p_.batch, p_.heads, p_.seq_q, p_.dim}) {
        throw fa::InputError("do.npy must have the shape of q.npy");
      }
      d_o_ = std::move(g.data);
    }
    // Q, O, dO, dQ are [B, H, Nq, d]; K, V, dK, dV [B, H, Nkv, d]; the lse and D one float a row.
    const std::size_t tensors = 4 * static_cast<std::size_t>(p_.q_elems() + p_.kv_elems()) * sizeof(float);
    const std::size_t rows = static_cast<std::size_t>(p_.rows()) * sizeof(float) + fa::backward::workspace_bytes(p_);
    fa::DemoFootprint f;
    f.shape = fa::describe(p_);
    f.device_bytes = tensors + rows;
    f.what = "Q, K, V, O, dO, dQ, dK, dV " + fa::format_bytes(static_cast<double>(tensors)) + " + lse and D " +
             fa::format_bytes(static_cast<double>(rows));
    f.plan = "storing P would add " + fa::format_bytes(stored_p_bytes());
    // The backward passes (one checked, then warm-up and timed) and the forward passes
    // (one, and as many again timed with --compare), at the forward's conservative rate.
    const double rate = fa::conservative_flops_per_second(device);
    const int64_t runs = 1 + opt_.warmup + opt_.repeats;
    const double flops = static_cast<double>(runs) * fa::backward::flops(p_) +
                         static_cast<double>(opt_.compare ? 1 + runs : 1) * p_.flops();
    f.estimate_s = flops / rate;
    f.estimate_basis = std::to_string(runs) + " backward passes of " + fixed(fa::backward::flops(p_), 0) +
                       " FLOP at a conservative " + fixed(rate / 1e9, 2) + " GFLOP/s for this device";
    f.shorter = "--repeats 1 --warmup 0, or a smaller --seq-q, --seq-kv, --batch or --heads.";
    return f;
  }

  fa::RunReport run(const fa::DeviceInfo& device) override {
    if (opt_.load_dir.empty()) {
      in_ = fa::random_inputs(p_, opt_.seed, static_cast<float>(opt_.magnitude));
      d_o_ = fa::random_output_gradient(p_, opt_.seed);
    }
    const fa::DeviceBuffer<float> q(in_.q), k(in_.k), v(in_.v), g(d_o_);
    fa::DeviceBuffer<float> out(static_cast<std::size_t>(p_.q_elems())), lse(static_cast<std::size_t>(p_.rows()));
    fa::DeviceBuffer<float> dq(static_cast<std::size_t>(p_.q_elems())), dk(static_cast<std::size_t>(p_.kv_elems())),
        dv(static_cast<std::size_t>(p_.kv_elems()));
    const std::size_t workspace = fa::backward::workspace_bytes(p_);
    fa::DeviceBuffer<unsigned char> ws(workspace);

    // The forward pass that training runs first: O and the lse the backward pass starts from.
    const auto forward = [&] { fa::flash2::attention(p_, q.data(), k.data(), v.data(), out.data(), lse.data()); };
    forward();
    for (auto* b : {&dq, &dk, &dv}) b->fill_bytes(fa::kPoisonByte);  // never written stays NaN and fails
    const auto backward = [&] {
      backward_(p_, {q.data(), k.data(), v.data(), out.data(), g.data(), lse.data(), dq.data(), dk.data(), dv.data()},
                ws.data());
    };
    backward();
    FA_CUDA_CHECK(cudaDeviceSynchronize());
    const fa::AttentionGradients<float> got{dq.download(), dk.download(), dv.download()};

    fa::RunReport r;
    r.stage = opt_.variant.empty() ? id() : id() + ":" + opt_.variant;
    r.title = "the backward pass, P recomputed from the log-sum-exp";
    r.device = device;
    r.shape = fa::describe(p_);
    r.dtype = p_.dtype;
    r.fields = fa::problem_fields(p_);
    r.fields.push_back({"flops", fa::backward::flops(p_)});
    r.fields.push_back({"stored_p_bytes", static_cast<int64_t>(stored_p_bytes())});
    r.workspace_bytes = workspace;
    r.hbm_model_bytes = fa::backward::hbm_bytes_model(p_);
    if (!variant_.empty()) r.notes.push_back({"variant", variant_});
    r.notes.push_back({"tiles", "Bc = " + std::to_string(fa::backward::Bc) + " key rows a block, Br = " +
                                    std::to_string(fa::backward::Br) + " query rows a step; " +
                                    fa::format_bytes(static_cast<double>(fa::backward::shared_bytes(p_.dim))) +
                                    " of shared memory per block"});
    r.notes.push_back({"memory", "the workspace holds D, one float a query row; storing P would need " +
                                     fa::format_bytes(stored_p_bytes())});
    if (opt_.check) {
      const fa::GradientCheck check =
          fa::check_attention_backward(p_, in_, d_o_, got, fa::sample_indices(p_.batch_heads(), check_heads_));
      r.checked = true;
      r.checked_what = std::to_string(check.heads.size()) + " of " + std::to_string(p_.batch_heads()) + " heads, whole,";
      r.checked_count = {"heads_checked", static_cast<int64_t>(check.heads.size())};
      r.checks.push_back({"dQ", check.dq, fa::gradient_namer(p_, check.heads, "dQ")});
      r.checks.push_back({"dK", check.dk, fa::gradient_namer(p_, check.heads, "dK")});
      r.checks.push_back({"dV", check.dv, fa::gradient_namer(p_, check.heads, "dV")});
    }
    if (!opt_.save_dir.empty()) {
      const std::vector<float> o_host = out.download();
      fa::save_npy_tensors(opt_.save_dir, p_, {{"q", &in_.q}, {"k", &in_.k}, {"v", &in_.v}, {"o", &o_host},
                                               {"do", &d_o_}, {"dq", &got.dq}, {"dk", &got.dk}, {"dv", &got.dv}});
    }

    const int warmup = static_cast<int>(opt_.warmup), repeats = static_cast<int>(opt_.repeats);
    r.median_ms = fa::time_device(backward, warmup, repeats).median_ms();
    r.warmup = opt_.warmup;
    r.repeats = opt_.repeats;
    r.metrics.push_back(fa::rate_metric(device, "tflops", fa::backward::flops(p_) / (r.median_ms * 1e-3) / 1e12,
                                        "TFLOP/s", "throughput", "(counting 2.5x the forward's FLOPs)", true));
    if (opt_.compare) {
      const double forward_ms = fa::time_device(forward, warmup, repeats).median_ms();
      fa::Metric m;
      m.key = "forward_ms";
      m.value = forward_ms;
      m.unit = "ms";
      m.label = "forward";
      m.note = "for stage 05's forward pass on the same inputs: the backward pass takes " +
               fixed(r.median_ms / forward_ms, 2) + "x as long";
      m.digits = 3;
      r.metrics.push_back(m);
    }
    return r;
  }

 private:
  // What storing P, one float per (row, key) of every head, would take: what this stage does without.
  double stored_p_bytes() const {
    return static_cast<double>(p_.batch_heads()) * static_cast<double>(p_.seq_q) * static_cast<double>(p_.seq_kv) *
           sizeof(float);
  }

  const std::vector<fa::Variant<fa::backward::BackwardRun>> variants_ = fa::backward::variants();
  int64_t check_heads_ = 2;  // --check-heads
  fa::backward::BackwardRun backward_ = fa::backward::attention_backward;  // or a --variant's
  std::string variant_;      // the --variant's name and summary, if one was given
  fa::DemoOptions opt_;
  fa::AttentionProblem p_;
  fa::AttentionInputs in_;
  std::vector<float> d_o_;
};

}  // namespace

/// Runs stage 10's demo through the shared driver; exits 0 when every check passed.
int main(int argc, char** argv) {
  BackwardDemo demo;
  return fa::run_demo(argc, argv, demo);
}
