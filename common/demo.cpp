#include "common/demo.h"

#include <cuda_runtime.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "common/cuda_check.h"
#include "common/decode_problem.h"
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

// A run whose conservative estimate exceeds this many seconds says so before it starts.
constexpr double kLongRunSeconds = 30.0;

int drive(int argc, const char* const* argv, Demo& demo) {
  DemoOptions opt = default_demo_options(is_cpu_backend());
  demo.set_defaults(opt);
  ArgParser parser(argv[0], "Stage " + demo.id() + ": " + demo.about());
  add_demo_options(parser, opt, demo.left_out_flags());
  demo.add_flags(parser);
  const std::string variants = demo.variant_help();
  if (!variants.empty()) parser.add_string("variant", &opt.variant, variants, "NAME");
  if (!parser.parse(argc, argv)) return kExitPassed;  // --help

  // The command line is checked before the device is touched.
  if (const std::optional<int> done = demo.setup(opt, parser)) return *done;
  const DeviceInfo device = require_device();
  const DemoFootprint need = demo.footprint(device);

  // Everything is sized before anything is allocated, so a shape that cannot fit fails
  // with a clear message instead of a failed cudaMalloc halfway through.
  require_fits(device, need.device_bytes, need.what);
  const std::string up_to = "up to " + format_duration(need.estimate_s) + " at a conservative rate";
  if (need.estimate_s > 0 && (opt.dry_run || need.estimate_s > kLongRunSeconds)) {
    std::cerr << (opt.dry_run ? "estimate: " : "note: ") << need.estimate_basis << ": this run could take up to "
              << format_duration(need.estimate_s) << ".\n";
    if (need.estimate_s > kLongRunSeconds && !need.shorter.empty()) std::cerr << "      Shorter: " << need.shorter << "\n";
  }
  if (opt.dry_run) {
    std::cout << "dry run: " << need.shape << " fits (" << format_bytes(static_cast<double>(need.device_bytes))
              << " on the device)" << (need.plan.empty() ? "" : "; " + need.plan)
              << (need.estimate_s > 0 ? "; " + up_to : "") << "; nothing was run\n";
    return kExitPassed;
  }

  const RunReport report = demo.run(device);
  if (opt.json) {
    print_report_json(std::cout, report);
  } else if (opt.brief) {
    std::cout << summary_line(report) << "\n";
  } else {
    print_report(std::cout, report);
  }
  return report.passed() ? kExitPassed : kExitCheckFailed;
}

// An attention stage (01-08): the StageDemo says what the stage is; the inputs, the check,
// the timing and --compare are the same for all of them.
class ForwardDemo final : public Demo {
 public:
  explicit ForwardDemo(const StageDemo& finished) : finished_(finished), stage_(finished) {}

  std::string id() const override { return finished_.id; }
  std::string about() const override {
    return finished_.title +
           ".\nRuns the stage on random (or loaded) inputs, checks it against a float64 CPU reference and "
           "reports its median time.";
  }
  std::string variant_help() const override {
    return finished_.variants.empty() ? "" : fa::variant_help(finished_.variants);
  }

  void add_flags(ArgParser& parser) override {
    if (finished_.masked) {
      parser.add_int("window-left", &window_left_, "sliding window: row i sees no key before i - this", 0);
      parser.add_int("window-right", &window_right_, "sliding window: row i sees no key after i + this", 0);
      parser.add_int("docs", &docs_,
                     "packed documents: this many sequences of random lengths (from --seed) laid end to end in "
                     "one of N rows; a row sees its own document only (needs --seq-q = --seq-kv)");
    }
    if (!finished_.block_sparse && !finished_.masked) return;
    const int64_t bq = finished_.masked ? finished_.masked->block_q : finished_.block_sparse->block_q;
    const int64_t bkv = finished_.masked ? finished_.masked->block_kv : finished_.block_sparse->block_kv;
    parser.add_real("block-density", &density_,
                    "block-sparse attention: keep each " + std::to_string(bq) + "x" + std::to_string(bkv) +
                        " block of the scores with this probability (a random mask from --seed); 1: dense",
                    0.0, 1.0);
  }

  std::optional<int> setup(const DemoOptions& opt, const ArgParser& parser) override {
    opt_ = opt;
    if (!opt.variant.empty()) stage_ = with_variant(finished_, opt.variant);
    p_.dtype = stage_dtype(stage_, opt.dtype);
    if (!opt.load_dir.empty()) {
      for (const char* f : {"batch", "heads", "seq-q", "seq-kv", "dim", "seed", "magnitude"}) {
        if (parser.given(f)) throw UsageError(std::string("--") + f + " cannot be combined with --load");
      }
    } else {
      // The stage's own head dims first, so that the message names the ones it runs.
      if (opt.dim > 0) stage_.require_dim(opt.dim);
      p_ = make_problem(opt.batch, opt.heads, opt.seq_q, opt.seq_kv, opt.dim, opt.scale, opt.causal, p_.dtype);
    }
    if (opt.causal && !stage_.supports_causal) throw InputError("stage " + stage_.id + " does not support --causal yet");
    sparse_ = parser.given("block-density");
    masked_ = sparse_ || parser.given("window-left") || parser.given("window-right") || parser.given("docs");
    if (masked_ && (opt.compare || !opt.variant.empty())) {
      throw UsageError("a mask (--block-density, --window-left, --window-right, --docs) runs the stage's own kernel "
                       "alone: not with --compare or --variant");
    }
    return std::nullopt;
  }

  DemoFootprint footprint(const DeviceInfo& device) override {
    if (!opt_.load_dir.empty()) {
      in_ = load_npy_inputs(opt_.load_dir, opt_.scale, opt_.causal, &p_);
      stage_.require_dim(p_.dim);
    }
    DemoFootprint f;
    f.shape = describe(p_);
    const std::size_t o_bytes = static_cast<std::size_t>(p_.q_elems()) * dtype_bytes(p_.dtype);
    const std::size_t extra = stage_run_bytes(stage_, p_) - o_bytes;  // workspace and lse
    f.device_bytes = p_.qkvo_bytes() + extra;
    f.what = "Q, K, V, O " + format_bytes(static_cast<double>(p_.qkvo_bytes())) + " + workspace " +
             format_bytes(static_cast<double>(extra));
    const double rate = conservative_flops_per_second(device);
    const int64_t passes = (1 + opt_.warmup + opt_.repeats) *
                           (1 + (opt_.compare ? static_cast<int64_t>(stage_.compare_with.size()) : 0));
    f.estimate_s = static_cast<double>(passes) * p_.flops() / rate;
    std::ostringstream basis;
    basis << p_.flops() << " FLOP per pass, " << passes << " passes (1 checked, " << opt_.warmup << " warm-up, "
          << opt_.repeats << " timed" << (opt_.compare ? ", each also for the --compare stages" : "")
          << ") at a conservative "
          << (rate >= 1e12 ? std::to_string(rate / 1e12).substr(0, 4) + " TFLOP/s"
                           : std::to_string(rate / 1e6).substr(0, 4) + " MFLOP/s")
          << " for this device";
    f.estimate_basis = basis.str();
    f.shorter = "--repeats 1 --warmup 0, or a smaller --seq-q, --seq-kv, --batch or --heads. "
                "The check stays at --check-rows rows whatever the size.";
    return f;
  }

  RunReport run(const DeviceInfo& device) override {
    if (opt_.load_dir.empty()) in_ = random_inputs(p_, opt_.seed, static_cast<float>(opt_.magnitude));
    const DeviceInputs inputs = upload_inputs(in_.q, in_.k, in_.v, p_.dtype);
    std::vector<float> out;
    RunReport report;
    if (masked_ && stage_.masked) {  // the same stage, its run prepared for the mask
      const StageDemo::Masked& ms = *stage_.masked;
      Mask mask;
      if (sparse_) mask.blocks = random_block_mask(p_, ms.block_q, ms.block_kv, density_, opt_.seed);
      mask.window_left = window_left_;
      mask.window_right = window_right_;
      if (docs_ > 0) {
        if (p_.seq_q != p_.seq_kv) throw InputError("--docs packs one sequence of both queries and keys: needs Nq = Nkv");
        if (docs_ > p_.seq_q) throw InputError("--docs: more documents than rows");
        mask.doc_lengths = random_doc_lengths(p_.seq_q, docs_, opt_.seed);
      }
      report = measure_stage(ms.apply(stage_, p_, mask), p_, in_, inputs.tensors(), device, opt_, &out, &mask);
    } else if (masked_) {  // the same stage, its run given the block mask's flags
      const StageDemo::BlockSparse& bs = *stage_.block_sparse;
      const Mask mask = block_sparse(random_block_mask(p_, bs.block_q, bs.block_kv, density_, opt_.seed));
      const DeviceBuffer<uint8_t> flags(mask.blocks->keep);
      StageDemo masked = stage_;
      masked.run = [&](const AttentionProblem& p, const DeviceTensors& t, void*) { bs.run(p, t, flags.data()); };
      report = measure_stage(masked, p_, in_, inputs.tensors(), device, opt_, &out, &mask);
    } else {
      report = measure_stage(stage_, p_, in_, inputs.tensors(), device, opt_, &out);
    }
    if (!opt_.save_dir.empty()) {
      save_npy_tensors(opt_.save_dir, p_, {{"q", &in_.q}, {"k", &in_.k}, {"v", &in_.v}, {"o", &out}});
    }
    if (opt_.compare) compare(inputs, device, &report);
    return report;
  }

 private:
  // --compare: earlier stages on the same inputs, each only if it fits now. A stage that
  // does not run in this precision runs in fp32 on the very same values (fp16 and bf16
  // values are all exactly fp32 values), uploaded once more as fp32.
  void compare(const DeviceInputs& inputs, const DeviceInfo& device, RunReport* report) const {
    DeviceInputs inputs32;
    for (const StageDemo& other : stage_.compare_with) {
      AttentionProblem po = p_;
      if (!other.runs_in(p_.dtype)) po.dtype = DType::F32;
      const bool upload32 = po.dtype != p_.dtype && !inputs32.q.data();
      const std::size_t need = stage_run_bytes(other, po) + (upload32 ? po.qkvo_bytes() : 0);
      if (!other.causal_ok(po)) {
        report->skipped.push_back(other.id + ": does not support --causal");
      } else if (!other.runs_dim(po.dim)) {
        report->skipped.push_back(other.id + ": does not run d = " + std::to_string(po.dim));
      } else if (!other.runs_in(po.dtype)) {
        report->skipped.push_back(other.id + ": does not run in " + dtype_name(po.dtype));
      } else if (!fits(require_device(), need)) {
        report->skipped.push_back(other.id + ": needs " + format_bytes(static_cast<double>(need)) + ", does not fit");
      } else {
        if (upload32) inputs32 = upload_inputs(in_.q, in_.k, in_.v, DType::F32);
        const DeviceTensors t = po.dtype == p_.dtype ? inputs.tensors() : inputs32.tensors();
        report->compared.push_back(measure_stage(other, po, in_, t, device, opt_, nullptr));
      }
    }
  }

  const StageDemo finished_;  // the stage as it ships
  StageDemo stage_;           // what runs: the finished stage or its --variant
  DemoOptions opt_;
  AttentionProblem p_;
  AttentionInputs in_;
  double density_ = 1.0;  // --block-density
  bool sparse_ = false;   // whether it was given
  int64_t window_left_ = -1, window_right_ = -1, docs_ = 0;  // --window-left, --window-right, --docs
  bool masked_ = false;   // whether any mask was asked for
};

}  // namespace

std::vector<std::pair<std::string, JsonScalar>> problem_fields(const AttentionProblem& p) {
  return {{"batch", p.batch},   {"heads", p.heads}, {"seq_q", p.seq_q},   {"seq_kv", p.seq_kv},
          {"dim", p.dim},       {"scale", p.scale}, {"causal", p.causal},
          {"qkvo_bytes", static_cast<int64_t>(p.qkvo_bytes())}};
}

std::vector<std::pair<std::string, JsonScalar>> problem_fields(const DecodeProblem& p) {
  return {{"batch", p.batch},       {"q_heads", p.q_heads},       {"kv_heads", p.kv_heads},
          {"seq_q", p.seq_q},       {"max_seq_kv", p.max_seq_kv}, {"total_kv", p.total_kv()},
          {"dim", p.dim},           {"scale", p.scale},           {"causal", p.causal}};
}

Metric rate_metric(const DeviceInfo& device, const std::string& key, double value, const std::string& unit,
                   const std::string& label, const std::string& note, bool headline, int digits) {
  Metric m;
  m.key = key;
  if (device.backend != "cpu" && std::isfinite(value)) m.value = value;  // no timed run: none
  m.unit = unit;
  m.label = label;
  m.note = note;
  m.digits = digits;
  m.headline = headline;
  return m;
}

AttentionInputs load_npy_inputs(const std::string& dir, double scale, bool causal, AttentionProblem* p) {
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
  *p = make_problem(q.shape[0], q.shape[1], q.shape[2], k.shape[2], q.shape[3], scale, causal, p->dtype);
  // fp32 files run in fp16 or bf16 as their values rounded to that type.
  AttentionInputs in{std::move(q.data), std::move(k.data), std::move(v.data)};
  round_inputs(in, p->dtype);
  return in;
}

void save_npy_tensors(const std::string& dir, const AttentionProblem& p, const std::vector<NamedTensor>& tensors) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw InputError(dir + ": cannot create directory (" + ec.message() + ")");
  for (const auto& [name, x] : tensors) {
    const int64_t n = static_cast<int64_t>(x->size()) == p.q_elems() ? p.seq_q : p.seq_kv;
    save_npy(dir + "/" + name + ".npy", {p.batch, p.heads, n, p.dim}, x->data(), p.dtype);
  }
}

StageDemo with_variant(const StageDemo& stage, const std::string& name) {
  const StageVariant& v = find_variant(stage.variants, name, stage.id);
  StageDemo s = stage;
  s.id += ":" + v.name;
  s.run = v.run;
  s.notes = [v](const AttentionProblem&) {
    return std::vector<std::pair<std::string, std::string>>{{"variant", v.name + ": " + v.summary}};
  };
  s.variants.clear();
  return s;
}

bool StageDemo::runs_in(DType t) const {
  for (DType d : dtypes) {
    if (d == t) return true;
  }
  return false;
}

bool StageDemo::runs_dim(int64_t d) const {
  if (head_dims.empty()) return true;
  for (int64_t h : head_dims) {
    if (h == d) return true;
  }
  return false;
}

void StageDemo::require_dim(int64_t d) const {
  if (runs_dim(d)) return;
  std::string list;
  for (std::size_t i = 0; i < head_dims.size(); ++i) {
    list += (i == 0 ? "" : (i + 1 == head_dims.size() ? " or " : ", ")) + std::to_string(head_dims[i]);
  }
  throw InputError("stage " + id + ": head dim " + std::to_string(d) + " is not supported (it runs d = " + list + ")");
}

DType stage_dtype(const StageDemo& stage, const std::string& dtype_flag) {
  if (dtype_flag.empty()) return stage.dtypes.front();
  DType t;
  if (!parse_dtype(dtype_flag, &t)) {
    throw UsageError("--dtype: unknown type '" + dtype_flag + "' (the types: fp32, fp16, bf16)");
  }
  if (!stage.runs_in(t)) {
    std::string list;
    for (std::size_t i = 0; i < stage.dtypes.size(); ++i) {
      list += (i == 0 ? "" : (i + 1 == stage.dtypes.size() ? " or " : ", ")) + std::string(dtype_name(stage.dtypes[i]));
    }
    throw InputError("stage " + stage.id + " runs in " + list + " only, not " + dtype_name(t) +
                     (t != DType::F32 ? " (fp16 and bf16 start at stage 06, on tensor cores)" : ""));
  }
  return t;
}

DeviceInputs upload_inputs(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                           DType t) {
  const auto encode = [t](const std::vector<float>& x) {
    std::vector<unsigned char> bytes(x.size() * dtype_bytes(t));
    if (t == DType::F32) {
      if (!x.empty()) std::memcpy(bytes.data(), x.data(), bytes.size());
    } else {
      for (std::size_t i = 0; i < x.size(); ++i) {
        const uint16_t b = to_bits16(t, x[i]);
        std::memcpy(bytes.data() + 2 * i, &b, 2);
      }
    }
    return DeviceBuffer<unsigned char>(bytes);
  };
  DeviceInputs in;
  in.dtype = t;
  in.q = encode(q);
  in.k = encode(k);
  in.v = encode(v);
  return in;
}

std::vector<float> download_as_float(const void* device_ptr, std::size_t n, DType t) {
  std::vector<float> out(n);
  if (n == 0) return out;
  if (t == DType::F32) {
    FA_CUDA_CHECK(cudaMemcpy(out.data(), device_ptr, n * sizeof(float), cudaMemcpyDeviceToHost));
    return out;
  }
  std::vector<uint16_t> bits(n);
  FA_CUDA_CHECK(cudaMemcpy(bits.data(), device_ptr, n * 2, cudaMemcpyDeviceToHost));
  for (std::size_t i = 0; i < n; ++i) out[i] = from_bits16(t, bits[i]);
  return out;
}

std::size_t stage_run_bytes(const StageDemo& stage, const AttentionProblem& p) {
  return static_cast<std::size_t>(p.q_elems()) * dtype_bytes(p.dtype) + (stage.workspace_bytes ? stage.workspace_bytes(p) : 0) +
         (stage.writes_lse ? static_cast<std::size_t>(p.rows()) * sizeof(float) : 0);
}

RunReport measure_stage(const StageDemo& stage, const AttentionProblem& p, const AttentionInputs& in,
                        const DeviceTensors& inputs, const DeviceInfo& device, const DemoOptions& opt,
                        std::vector<float>* out_host, const Mask* mask) {
  RunReport report;
  report.stage = stage.id;
  report.title = stage.title;
  report.device = device;
  report.shape = describe(p);
  report.dtype = p.dtype;
  report.fields = problem_fields(p);
  report.workspace_bytes = stage.workspace_bytes ? stage.workspace_bytes(p) : 0;
  report.hbm_model_bytes = stage.hbm_bytes && !mask ? stage.hbm_bytes(p) : 0.0;  // the models are dense
  report.notes = {{"Q,K,V,O", format_bytes(static_cast<double>(p.qkvo_bytes()))}};
  if (stage.notes) {
    for (auto& note : stage.notes(p)) report.notes.push_back(std::move(note));
  }
  // The fraction of the work done: all, or what the mask leaves (Mask::work_fraction()).
  const double kept = mask ? mask->work_fraction(p) : 1.0;
  if (mask) {
    std::ostringstream what;
    what << std::fixed << std::setprecision(3);
    if (mask->only_blocks()) {
      const BlockMask& b = *mask->blocks;
      what << b.block_q << "x" << b.block_kv << " blocks, " << std::llround(kept * b.keep.size()) << " of "
           << b.keep.size() << " kept (" << kept << "); throughput counts the kept blocks' FLOPs";
    } else {
      what << mask->describe() << "; throughput counts " << kept << " of the FLOPs (the scores left visible)";
    }
    report.notes.push_back({"mask", what.str()});
    report.fields.push_back({mask->only_blocks() ? "block_density" : "visible_fraction", kept});
  }

  DeviceBuffer<unsigned char> o(static_cast<std::size_t>(p.q_elems()) * dtype_bytes(p.dtype));
  DeviceBuffer<unsigned char> ws(report.workspace_bytes);
  DeviceBuffer<float> lse(stage.writes_lse ? static_cast<std::size_t>(p.rows()) : 0);
  DeviceTensors t = inputs;
  t.dtype = p.dtype;
  t.o = o.data();
  t.lse = stage.writes_lse ? lse.data() : nullptr;
  const auto forward = [&] { stage.run(p, t, ws.data()); };

  // One checked run on a poisoned output: an element never written stays NaN and fails.
  o.fill_bytes(kPoisonByte);
  lse.fill_bytes(kPoisonByte);
  const auto t0 = std::chrono::steady_clock::now();
  forward();
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  const double first_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::vector<float> out = download_as_float(o.data(), static_cast<std::size_t>(p.q_elems()), p.dtype);
  if (opt.check) {
    report.checked = true;
    const std::vector<float> lse_out = lse.download();
    const AttentionCheck check =
        check_attention(p, in, out, sample_rows(p, opt.check_rows), stage.writes_lse ? &lse_out : nullptr, mask);
    report.checked_what = std::to_string(check.rows.size()) + " of " + std::to_string(p.rows()) + " query rows";
    report.checked_count = {"rows_checked", static_cast<int64_t>(check.rows.size())};
    report.checks.push_back({"O", check.o, output_namer(p, check.rows)});
    if (check.has_lse) report.checks.push_back({"lse", check.lse, row_namer(p, check.rows, "lse")});
  }
  if (out_host) *out_host = std::move(out);

  // Runs that take more than a few seconds in all show their progress on stderr.
  Progress progress;
  if (first_s * static_cast<double>(opt.warmup + opt.repeats) > 5.0) {
    std::cerr << "timing " << stage.id << ": one pass took " << format_duration(first_s) << "; "
              << opt.warmup + opt.repeats << " more to go\n";
    progress = [&](int done, int total) {
      std::cerr << "  " << stage.id << ": run " << done << "/" << total << (done <= opt.warmup ? " (warm-up)" : "")
                << "\n";
    };
  }
  const Timing timing =
      time_device(forward, static_cast<int>(opt.warmup), static_cast<int>(opt.repeats), progress);
  report.median_ms = timing.median_ms();
  report.warmup = opt.warmup;
  report.repeats = opt.repeats;
  const double seconds = report.median_ms * 1e-3;
  report.metrics = {
      rate_metric(device, "tflops", seconds > 0 ? kept * p.flops() / seconds / 1e12 : 0.0, "TFLOP/s", "throughput",
                  mask ? "(4*B*H*Nq*Nkv*d, times the fraction the mask leaves)" : "(4*B*H*Nq*Nkv*d)", true),
      rate_metric(device, "effective_gbps", seconds > 0 ? static_cast<double>(p.qkvo_bytes()) / seconds / 1e9 : 0.0,
                  "GB/s", "effective", "(Q, K, V read + O written once)", false, 1)};
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

int run_demo(int argc, const char* const* argv, Demo& demo) {
  return run_guarded(argv[0], [&] { return drive(argc, argv, demo); });
}

int run_stage_demo(int argc, const char* const* argv, const StageDemo& stage) {
  ForwardDemo demo(stage);
  return run_demo(argc, argv, demo);
}

}  // namespace fa
