#include "common/demo.h"

#include <cuda_runtime.h>

#include <filesystem>
#include <iostream>

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

// Q, K, V from DIR/q.npy, k.npy, v.npy; the shape comes from the files.
AttentionInputs load_inputs(const std::string& dir, const DemoOptions& o, AttentionProblem* p) {
  NpyArray q = load_npy(dir + "/q.npy"), k = load_npy(dir + "/k.npy"), v = load_npy(dir + "/v.npy");
  const auto need4 = [](const NpyArray& a, const char* name) {
    if (a.shape.size() != 4) {
      throw InputError(std::string(name) + ".npy must have shape [B, H, N, d], got " +
                       std::to_string(a.shape.size()) + " dimensions");
    }
  };
  need4(q, "q");
  need4(k, "k");
  need4(v, "v");
  if (k.shape != v.shape) throw InputError("k.npy and v.npy must have the same shape");
  if (q.shape[0] != k.shape[0] || q.shape[1] != k.shape[1] || q.shape[3] != k.shape[3]) {
    throw InputError("q.npy and k.npy must agree on B, H and d");
  }
  *p = make_problem(q.shape[0], q.shape[1], q.shape[2], k.shape[2], q.shape[3], o.scale, o.causal);
  return AttentionInputs{std::move(q.data), std::move(k.data), std::move(v.data)};
}

void save_tensors(const std::string& dir, const AttentionProblem& p, const AttentionInputs& in,
                  const std::vector<float>& out) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw InputError(dir + ": cannot create directory (" + ec.message() + ")");
  const std::vector<int64_t> qs = {p.batch, p.heads, p.seq_q, p.dim};
  const std::vector<int64_t> ks = {p.batch, p.heads, p.seq_kv, p.dim};
  save_npy(dir + "/q.npy", qs, in.q.data());
  save_npy(dir + "/k.npy", ks, in.k.data());
  save_npy(dir + "/v.npy", ks, in.v.data());
  save_npy(dir + "/o.npy", qs, out.data());
}

int run(int argc, const char* const* argv, const StageDemo& stage) {
  DemoOptions opt = default_demo_options(is_cpu_backend());
  ArgParser parser(argv[0], "Stage " + stage.id + ": " + stage.title +
                                ".\nRuns the stage on random (or loaded) inputs, checks it against "
                                "a float64 CPU reference and reports its median time.");
  add_demo_options(parser, opt);
  if (!parser.parse(argc, argv)) return kExitPassed;  // --help

  // Validate what the command line says before touching the device.
  AttentionProblem p;
  AttentionInputs in;
  if (!opt.load_dir.empty()) {
    for (const char* f : {"batch", "heads", "seq-q", "seq-kv", "dim", "seed", "magnitude"}) {
      if (parser.given(f)) throw UsageError(std::string("--") + f + " cannot be combined with --load");
    }
  } else {
    p = make_problem(opt.batch, opt.heads, opt.seq_q, opt.seq_kv, opt.dim, opt.scale, opt.causal);
  }
  if (opt.causal && !stage.supports_causal) {
    throw InputError("stage " + stage.id + " does not support --causal yet");
  }
  const DeviceInfo device = require_device();
  if (!opt.load_dir.empty()) in = load_inputs(opt.load_dir, opt, &p);

  // Everything is sized before anything is allocated, so a shape that cannot fit
  // fails with a clear message instead of a failed cudaMalloc halfway through.
  const std::size_t o_bytes = static_cast<std::size_t>(p.q_elems()) * sizeof(float);
  const std::size_t extra = stage_run_bytes(stage, p) - o_bytes;  // workspace and lse
  require_fits(device, p.qkvo_bytes() + extra,
               "Q, K, V, O " + format_bytes(static_cast<double>(p.qkvo_bytes())) + " + workspace " +
                   format_bytes(static_cast<double>(extra)));

  if (opt.load_dir.empty()) in = random_inputs(p, opt.seed, static_cast<float>(opt.magnitude));
  DeviceBuffer<float> q(in.q), k(in.k), v(in.v);
  const DeviceTensors inputs{q.data(), k.data(), v.data(), nullptr, nullptr};
  std::vector<float> out;
  RunReport report = measure_stage(stage, p, in, inputs, device, opt, &out);
  if (!opt.save_dir.empty()) save_tensors(opt.save_dir, p, in, out);

  // --compare: earlier stages on the same inputs, each only if it fits now.
  if (opt.compare) {
    for (const StageDemo& other : stage.compare_with) {
      const std::size_t need = stage_run_bytes(other, p);
      if (!other.causal_ok(p)) {
        report.skipped.push_back(other.id + ": does not support --causal");
      } else if (!fits(require_device(), need)) {
        report.skipped.push_back(other.id + ": needs " + format_bytes(static_cast<double>(need)) + ", does not fit");
      } else {
        report.compared.push_back(measure_stage(other, p, in, inputs, device, opt, nullptr));
      }
    }
  }

  bool passed = report.passed();
  for (const RunReport& r : report.compared) passed = passed && r.passed();
  if (opt.json) {
    print_report_json(std::cout, report);
    for (const RunReport& r : report.compared) print_report_json(std::cout, r);
  } else if (opt.brief) {
    std::cout << summary_line(report) << "\n";
  } else {
    print_report(std::cout, report);
  }
  return passed ? kExitPassed : kExitCheckFailed;
}

}  // namespace

std::size_t stage_run_bytes(const StageDemo& stage, const AttentionProblem& p) {
  return static_cast<std::size_t>(p.q_elems()) * sizeof(float) + (stage.workspace_bytes ? stage.workspace_bytes(p) : 0) +
         (stage.writes_lse ? static_cast<std::size_t>(p.rows()) * sizeof(float) : 0);
}

RunReport measure_stage(const StageDemo& stage, const AttentionProblem& p, const AttentionInputs& in,
                        const DeviceTensors& inputs, const DeviceInfo& device, const DemoOptions& opt,
                        std::vector<float>* out_host) {
  RunReport report;
  report.stage = stage.id;
  report.title = stage.title;
  report.device = device;
  report.problem = p;
  report.workspace_bytes = stage.workspace_bytes ? stage.workspace_bytes(p) : 0;
  report.hbm_model_bytes = stage.hbm_bytes ? stage.hbm_bytes(p) : 0.0;
  if (stage.notes) report.notes = stage.notes(p);

  DeviceBuffer<float> o(static_cast<std::size_t>(p.q_elems()));
  DeviceBuffer<unsigned char> ws(report.workspace_bytes);
  DeviceBuffer<float> lse(stage.writes_lse ? static_cast<std::size_t>(p.rows()) : 0);
  DeviceTensors t = inputs;
  t.o = o.data();
  t.lse = stage.writes_lse ? lse.data() : nullptr;
  const auto forward = [&] { stage.run(p, t, ws.data()); };

  // One checked run on a poisoned output: an element never written stays NaN and fails.
  o.fill_bytes(kPoisonByte);
  lse.fill_bytes(kPoisonByte);
  forward();
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> out = o.download();
  if (opt.check) {
    report.checked = true;
    const std::vector<float> lse_out = lse.download();
    report.check = check_attention(p, in, out, sample_rows(p, opt.check_rows),
                                   stage.writes_lse ? &lse_out : nullptr);
  }
  if (out_host) *out_host = std::move(out);

  const Timing timing = time_device(forward, static_cast<int>(opt.warmup), static_cast<int>(opt.repeats));
  report.median_ms = timing.median_ms();
  report.warmup = opt.warmup;
  report.repeats = opt.repeats;
  return report;
}

int run_guarded(const char* program, const std::function<int()>& body) {
  try {
    return body();
  } catch (const Error& e) {
    std::cerr << program << ": error: " << e.what() << "\n";
    return e.exit_code();
  } catch (const std::exception& e) {  // a kernel fault on the CPU backend, bad_alloc, ...
    std::cerr << program << ": error: " << e.what() << "\n";
    return kExitCudaError;
  }
}

int run_stage_demo(int argc, const char* const* argv, const StageDemo& stage) {
  return run_guarded(argv[0], [&] { return run(argc, argv, stage); });
}

}  // namespace fa
