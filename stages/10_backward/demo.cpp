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
#include "common/json.h"
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

// The shared demo flags (common/cli.h), but whole heads are checked, not rows.
struct Options : fa::DemoOptions {
  int64_t check_heads = 2;  // --check-heads
};

std::string fixed(double x, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, x);
  return buf;
}

// Q, K, V and dO from DIR/q.npy, k.npy, v.npy, do.npy; the shape comes from the files.
void load_tensors(const std::string& dir, const Options& o, fa::AttentionProblem* p, fa::AttentionInputs* in,
                  std::vector<float>* d_o) {
  *in = fa::load_npy_inputs(dir, o.scale, o.causal, p);
  fa::NpyArray g = fa::load_npy(dir + "/do.npy");
  if (g.shape != std::vector<int64_t>{p->batch, p->heads, p->seq_q, p->dim}) {
    throw fa::InputError("do.npy must have the shape of q.npy");
  }
  *d_o = std::move(g.data);
}

int run(int argc, char** argv) {
  const bool cpu = fa::is_cpu_backend();
  Options o;
  static_cast<fa::DemoOptions&>(o) = fa::default_demo_options(cpu);  // the same shapes as the other demos
  o.dtype = "fp32";
  fa::ArgParser a(argv[0],
                  "Stage 10_backward: the backward pass, dQ, dK and dV recomputed from the forward's log-sum-exp.\n"
                  "Runs stage 05's forward pass and then this stage on random (or loaded) inputs and a random dO, "
                  "checks the gradients against a float64 CPU reference and reports the backward pass's median time.");
  fa::add_demo_options(a, o, {"check-rows"});
  a.reword("dtype", "element type: fp32 (the only one this stage runs)");
  a.reword("seed", "seed of the random inputs and dO");
  a.reword("magnitude", "Q, K, V are uniform in [-X, X] (dO in [-1, 1])");
  a.reword("compare", "also time the forward pass (stage 05) on the same inputs");
  a.reword("dry-run", "check the shape and say what it needs, run nothing");
  a.reword("load", "read q.npy, k.npy, v.npy, do.npy from DIR (sets the shape)");
  a.reword("save", "write q, k, v, o, do, dq, dk, dv as .npy files to DIR");
  a.add_int("check-heads", &o.check_heads, "most heads to check, whole (spread over all batches and heads)");
  const std::vector<fa::Variant<fa::backward::BackwardRun>> variants = fa::backward::variants();
  a.add_string("variant", &o.variant, fa::variant_help(variants), "NAME");
  if (!a.parse(argc, argv)) return fa::kExitPassed;
  const fa::backward::BackwardRun run_backward =
      o.variant.empty() ? fa::backward::attention_backward : fa::find_variant(variants, o.variant, "10_backward").run;
  const std::string name = o.variant.empty() ? "10_backward" : "10_backward:" + o.variant;

  fa::DType dtype;
  if (!fa::parse_dtype(o.dtype, &dtype)) {
    throw fa::UsageError("--dtype: unknown type '" + o.dtype + "' (the types: fp32, fp16, bf16)");
  }
  if (dtype != fa::DType::F32) {
    throw fa::InputError(std::string("stage 10_backward runs in fp32 only, not ") + fa::dtype_name(dtype));
  }
  fa::AttentionProblem p;
  fa::AttentionInputs in;
  std::vector<float> d_o;
  if (!o.load_dir.empty()) {
    for (const char* f : {"batch", "heads", "seq-q", "seq-kv", "dim", "seed", "magnitude"}) {
      if (a.given(f)) throw fa::UsageError(std::string("--") + f + " cannot be combined with --load");
    }
  } else {
    p = fa::make_problem(o.batch, o.heads, o.seq_q, o.seq_kv, o.dim, o.scale, o.causal);
  }
  const fa::DeviceInfo device = fa::require_device();
  if (!o.load_dir.empty()) load_tensors(o.load_dir, o, &p, &in, &d_o);

  // Q, O, dO, dQ are [B, H, Nq, d]; K, V, dK, dV [B, H, Nkv, d]; the lse and D one float a row.
  const std::size_t q_bytes = static_cast<std::size_t>(p.q_elems()) * sizeof(float);
  const std::size_t kv_bytes = static_cast<std::size_t>(p.kv_elems()) * sizeof(float);
  const std::size_t row_bytes = static_cast<std::size_t>(p.rows()) * sizeof(float);
  const std::size_t workspace = fa::backward::workspace_bytes(p);
  const std::size_t total = 4 * q_bytes + 4 * kv_bytes + row_bytes + workspace;
  const double p_bytes = static_cast<double>(p.batch_heads()) * static_cast<double>(p.seq_q) *
                         static_cast<double>(p.seq_kv) * sizeof(float);
  fa::require_fits(device, total,
                   "Q, K, V, O, dO, dQ, dK, dV " + fa::format_bytes(static_cast<double>(total - row_bytes - workspace)) +
                       " + lse and D " + fa::format_bytes(static_cast<double>(row_bytes + workspace)));
  if (o.dry_run) {
    std::cout << "dry run: " << fa::describe(p) << " fits (" << fa::format_bytes(static_cast<double>(total))
              << " on the device; storing P would add " << fa::format_bytes(p_bytes) << "); nothing was run\n";
    return fa::kExitPassed;
  }

  if (o.load_dir.empty()) {
    in = fa::random_inputs(p, o.seed, static_cast<float>(o.magnitude));
    d_o = fa::random_output_gradient(p, o.seed);
  }
  const fa::DeviceBuffer<float> q(in.q), k(in.k), v(in.v), g(d_o);
  fa::DeviceBuffer<float> out(static_cast<std::size_t>(p.q_elems())), lse(static_cast<std::size_t>(p.rows()));
  fa::DeviceBuffer<float> dq(static_cast<std::size_t>(p.q_elems())), dk(static_cast<std::size_t>(p.kv_elems())),
      dv(static_cast<std::size_t>(p.kv_elems()));
  fa::DeviceBuffer<unsigned char> ws(workspace);

  // The forward pass that training runs first: O and the lse the backward pass starts from.
  const auto forward = [&] { fa::flash2::attention(p, q.data(), k.data(), v.data(), out.data(), lse.data()); };
  forward();
  for (auto* b : {&dq, &dk, &dv}) b->fill_bytes(fa::kPoisonByte);  // never written stays NaN and fails
  const auto backward = [&] {
    run_backward(p, {q.data(), k.data(), v.data(), out.data(), g.data(), lse.data(), dq.data(),
                   dk.data(), dv.data()}, ws.data());
  };
  backward();
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  const fa::AttentionGradients<float> got{dq.download(), dk.download(), dv.download()};
  fa::GradientCheck check;
  if (o.check) {
    check = fa::check_attention_backward(p, in, d_o, got, fa::sample_indices(p.batch_heads(), o.check_heads));
  }
  if (!o.save_dir.empty()) {
    const std::vector<float> o_host = out.download();
    fa::save_npy_tensors(o.save_dir, p, {{"q", &in.q}, {"k", &in.k}, {"v", &in.v}, {"o", &o_host}, {"do", &d_o},
                                 {"dq", &got.dq}, {"dk", &got.dk}, {"dv", &got.dv}});
  }
  const int warmup = static_cast<int>(o.warmup), repeats = static_cast<int>(o.repeats);
  const double ms = fa::time_device(backward, warmup, repeats).median_ms();
  const double forward_ms = o.compare ? fa::time_device(forward, warmup, repeats).median_ms() : 0.0;
  const double tflops = fa::backward::flops(p) / (ms * 1e-3) / 1e12;
  const bool passed = !o.check || check.passed();
  const std::string verdict = !o.check ? "UNCHECKED" : (passed ? "PASSED" : "FAILED");

  const std::string where = cpu ? "CPU backend" : "GPU: " + device.name;
  const std::string summary = name + ": " + verdict + "  " + fixed(ms, 3) + " ms" +
                              (cpu ? "" : "  " + fixed(tflops, 2) + " TFLOP/s") + "  [" + fa::describe(p) + "]  [" +
                              where + "]";
  if (o.json) {
    fa::JsonWriter w(std::cout);
    w.begin_object().field("stage", name).field("backend", device.backend).field("device", device.name);
    w.field("batch", p.batch).field("heads", p.heads).field("seq_q", p.seq_q).field("seq_kv", p.seq_kv);
    w.field("dim", p.dim).field("causal", p.causal).field("dtype", "fp32").field("median_ms", ms);
    w.field("repeats", o.repeats).field("flops", fa::backward::flops(p));
    w.field("tflops", cpu ? std::nullopt : std::optional<double>(tflops));
    w.field("workspace_bytes", static_cast<uint64_t>(workspace)).field("stored_p_bytes", p_bytes);
    w.field("forward_ms", o.compare ? std::optional<double>(forward_ms) : std::nullopt);
    if (o.check) {
      w.field("heads_checked", static_cast<uint64_t>(check.heads.size()));
      w.field("max_abs_err_dq", check.dq.max_abs_err).field("max_abs_err_dk", check.dk.max_abs_err);
      w.field("max_abs_err_dv", check.dv.max_abs_err);
    }
    w.field("result", verdict).end_object();
    std::cout << "\n";
  } else if (o.brief) {
    std::cout << summary << "\n";
  } else {
    const auto line = [](const std::string& key, const std::string& value) {
      std::cout << "  " << key << std::string(key.size() < 12 ? 12 - key.size() : 1, ' ') << value << "\n";
    };
    std::cout << "stage " << name << ": the backward pass, P recomputed from the log-sum-exp\n";
    line("device", cpu ? device.name + " (CPU backend: timings are not GPU performance)"
                       : device.name + " (" + std::to_string(device.sm_count) + " SMs)");
    line("shape", fa::describe(p));
    line("tiles", "Bc = " + std::to_string(fa::backward::Bc) + " key rows a block, Br = " +
                      std::to_string(fa::backward::Br) + " query rows a step; " +
                      fa::format_bytes(static_cast<double>(fa::backward::shared_bytes(p.dim))) +
                      " of shared memory per block");
    line("memory", "D " + fa::format_bytes(static_cast<double>(workspace)) + " beyond the tensors; storing P would need " +
                       fa::format_bytes(p_bytes));
    line("IO model", fa::format_bytes(fa::backward::hbm_bytes_model(p)) + " of HBM traffic per backward pass");
    line("time", "median " + fixed(ms, 3) + " ms over " + std::to_string(o.repeats) + " runs (" +
                     std::to_string(o.warmup) + " warm-up)" + (cpu ? " on the CPU backend" : ", " + fixed(tflops, 2) +
                     " TFLOP/s counting 2.5x the forward's FLOPs"));
    if (o.compare) {
      line("compare", "forward pass (stage 05) on the same inputs: " + fixed(forward_ms, 3) + " ms; the backward pass takes " +
                          fixed(ms / forward_ms, 2) + "x as long");
    }
    if (o.check) {
      line("check", std::to_string(check.heads.size()) + " of " + std::to_string(p.batch_heads()) +
                        " heads, whole, against the float64 CPU reference");
      line("dQ", fa::describe(check.dq, fa::gradient_namer(p, check.heads, "dQ")));
      line("dK", fa::describe(check.dk, fa::gradient_namer(p, check.heads, "dK")));
      line("dV", fa::describe(check.dv, fa::gradient_namer(p, check.heads, "dV")));
    }
    std::cout << summary << "\n";
  }
  return passed ? fa::kExitPassed : fa::kExitCheckFailed;
}

}  // namespace

/// Runs stage 10's demo; exits 0 when every check passed.
int main(int argc, char** argv) {
  return fa::run_guarded(argv[0], [&] { return run(argc, argv); });
}
