/**
 * \file benchmarks/bench.cpp
 * \brief fa_bench: every stage, and the cuBLAS baseline, over a sweep of sequence
 *        lengths on the same inputs; one CSV row and one JSON object per measurement.
 *
 * \code
 * fa_bench                                   # B=4 H=32, d = 64 and 128, N = 512 ... 16384
 * fa_bench --dim 64 --seq 1024,4096 --stages 01_naive,05_flash2
 * fa_bench --csv results/bench.csv --json results/bench.json
 * fa_bench --profile --batch 1 --seq 4096 --stages 04_flash1   # one pass, for Nsight Compute
 * fa_bench --stages 05_flash2,06_tensor_cores --precisions fp16,bf16 --causal
 * \endcode
 *
 * For each (d, N) the inputs are drawn once; each precision gets them rounded to that
 * type, and every stage that runs in it runs on them: one checked
 * run on a poisoned output (a sample of rows against the float64 reference), warm-up,
 * then timed repeats (CUDA events, median). A stage whose memory does not fit is
 * skipped with a note. fa_bench_cpu runs the same harness on the CPU backend, labelled
 * as such: its times say nothing about a GPU.
 */
#include <cuda_runtime.h>

#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "common/cli.h"
#include "common/cuda_check.h"
#include "common/demo.h"
#include "common/device.h"
#include "common/device_buffer.h"
#include "common/errors.h"
#include "common/json.h"
#include "common/random.h"
#include "common/reference.h"
#include "common/report.h"
#include "stages/01_naive/naive_attention.h"
#include "stages/02_online_softmax/online_softmax.h"
#include "stages/03_streaming/streaming_attention.h"
#include "stages/04_flash1/flash1_attention.h"
#include "stages/05_flash2/flash2_attention.h"
#include "stages/06_tensor_cores/tensor_core_attention.h"
#include "stages/07_memory_pipeline/pipelined_attention.h"
#if FA_BENCH_HOPPER
#include "stages/08_hopper/hopper_attention.h"
#endif
#if !FA_CPU_BACKEND
#include "benchmarks/cublas_baseline.h"
#endif

namespace {

using fa::AttentionProblem;
using fa::StageDemo;

struct BenchOptions {
  int64_t batch = 4, heads = 32;
  std::vector<int64_t> dims = {64, 128};
  std::vector<int64_t> seqs = {512, 1024, 2048, 4096, 8192, 16384};
  std::string stages = "all";
  int64_t warmup = 2;
  int64_t repeats = 10;      // at most
  int64_t min_repeats = 3;   // at least, however slow
  double seconds = 0.5;      // timed seconds per point the repeat count aims for
  int64_t check_rows = 128;
  uint64_t seed = 2024;
  std::string precisions = "fp32,fp16,bf16";
  bool causal = false;
  std::string csv, json;
  bool profile = false;
  bool list = false;
};

// One measured (or skipped) point: a row of the CSV, an object of the JSON.
struct Row {
  std::string name, title, status, note;
  AttentionProblem p;
  double median_ms = 0, tflops = 0, max_abs_err = -1, hbm_model_bytes = 0;
  int64_t repeats = 0, checked_rows = 0;
  std::size_t workspace_bytes = 0, device_bytes = 0;
};

// Facts every row repeats, so each CSV line stands on its own.
struct Context {
  fa::DeviceInfo device;
  std::string cuda;  // "13.0", or "none" on the CPU backend
  std::string date;  // UTC, ISO 8601
  std::string command;
};

std::vector<StageDemo> all_stages() {
  std::vector<StageDemo> s = {fa::naive::describe(), fa::online::describe(), fa::streaming::describe(),
                              fa::flash1::describe(), fa::flash2::describe(), fa::tensor_core::describe(),
                              fa::pipeline::describe()};
#if FA_BENCH_HOPPER
  s.push_back(fa::hopper::describe());
#endif
#if !FA_CPU_BACKEND
  s.push_back(fa::bench::cublas_baseline());
#endif
  return s;
}

std::vector<StageDemo> select_stages(const std::string& names) {
  const std::vector<StageDemo> all = all_stages();
  if (names == "all") return all;
  std::vector<StageDemo> picked;
  std::stringstream in(names);
  std::string name;
  while (std::getline(in, name, ',')) {
    bool found = false;
    for (const StageDemo& s : all) {
      if (s.id == name) picked.push_back(s), found = true;
    }
    if (!found) throw fa::UsageError("--stages: unknown stage '" + name + "' (see --list)");
  }
  if (picked.empty()) throw fa::UsageError("--stages: needs at least one stage");
  return picked;
}

std::string cuda_version() {
#if FA_CPU_BACKEND
  return "none";
#else
  int v = 0;
  FA_CUDA_CHECK(cudaRuntimeGetVersion(&v));
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
#endif
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string num(double x, const char* fmt = "%.6g") {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, x);
  return buf;
}

const char* kCsvHeader =
    "source,name,precision,backend,device,cuda,batch,heads,seq_q,seq_kv,dim,causal,median_ms,repeats,"
    "tflops,workspace_bytes,device_bytes,hbm_model_bytes,max_abs_err,checked_rows,status,note";

std::string csv_line(const Context& c, const Row& r) {
  const bool measured = r.status == "passed" || r.status == "FAILED" || r.status == "unchecked";
  std::ostringstream s;
  s << (r.name == "cublas_baseline" ? "cublas" : "stages") << "," << r.name << "," << fa::dtype_name(r.p.dtype) << ","
    << c.device.backend << ","
    << csv_field(c.device.name) << "," << c.cuda << "," << r.p.batch << "," << r.p.heads << "," << r.p.seq_q << ","
    << r.p.seq_kv << "," << r.p.dim << "," << (r.p.causal ? 1 : 0) << ","
    << (measured && r.repeats > 0 ? num(r.median_ms) : "") << "," << r.repeats << ","
    << (measured && r.repeats > 0 && c.device.backend != "cpu" ? num(r.tflops, "%.4g") : "") << ","
    << r.workspace_bytes << ","
    << r.device_bytes << "," << num(r.hbm_model_bytes, "%.0f") << ","
    << (r.max_abs_err >= 0 ? num(r.max_abs_err, "%.3g") : "") << "," << r.checked_rows << "," << r.status
    << "," << csv_field(r.note);
  return s.str();
}

void write_json(const std::string& path, const Context& c, const std::vector<Row>& rows) {
  std::ofstream out(path);
  if (!out) throw fa::InputError(path + ": cannot write");
  fa::JsonWriter w(out);
  w.begin_object().field("tool", "fa_bench").field("device", c.device.name).field("backend", c.device.backend);
  w.field("compute_capability", std::to_string(c.device.cc_major) + "." + std::to_string(c.device.cc_minor));
  w.field("memory_bytes", static_cast<uint64_t>(c.device.total_bytes)).field("cuda", c.cuda).field("date", c.date);
  w.field("command", c.command).key("rows").begin_array();
  for (const Row& r : rows) {
    const bool timed = r.repeats > 0;
    w.begin_object().field("name", r.name).field("title", r.title).field("batch", r.p.batch).field("heads", r.p.heads);
    w.field("seq_q", r.p.seq_q).field("seq_kv", r.p.seq_kv).field("dim", r.p.dim).field("causal", r.p.causal);
    w.field("precision", fa::dtype_name(r.p.dtype));
    w.field("median_ms", timed ? std::optional<double>(r.median_ms) : std::nullopt).field("repeats", r.repeats);
    w.field("tflops", timed ? std::optional<double>(r.tflops) : std::nullopt);
    w.field("workspace_bytes", static_cast<uint64_t>(r.workspace_bytes));
    w.field("device_bytes", static_cast<uint64_t>(r.device_bytes)).field("hbm_model_bytes", r.hbm_model_bytes);
    w.field("max_abs_err", r.max_abs_err >= 0 ? std::optional<double>(r.max_abs_err) : std::nullopt);
    w.field("checked_rows", r.checked_rows).field("status", r.status).field("note", r.note).end_object();
  }
  w.end_array().end_object();
  out << "\n";
}

// Remembers each stage's last time, to choose how many repeats the next point gets.
class RepeatPlanner {
 public:
  explicit RepeatPlanner(const BenchOptions& o) : o_(o) {}
  // Warm-up and repeats for `stage` on `p`: as many repeats as fit in o.seconds,
  // between o.min_repeats and o.repeats; one warm-up run for a slow point.
  std::pair<int64_t, int64_t> plan(const std::string& stage, const AttentionProblem& p) const {
    const auto it = last_.find(key(stage, p));
    if (it == last_.end()) return {o_.warmup, o_.repeats};
    const double estimate_ms = it->second.second * p.flops() / it->second.first;
    const double fit = o_.seconds * 1000.0 / std::max(estimate_ms, 1e-3);
    const int64_t repeats = std::clamp<int64_t>(static_cast<int64_t>(fit), o_.min_repeats, o_.repeats);
    return {estimate_ms > 250.0 ? std::min<int64_t>(o_.warmup, 1) : o_.warmup, repeats};
  }
  void record(const std::string& stage, const AttentionProblem& p, double ms) {
    if (ms > 0) last_[key(stage, p)] = {p.flops(), ms};
  }

 private:
  static std::string key(const std::string& stage, const AttentionProblem& p) {
    return stage + "/" + fa::dtype_name(p.dtype);
  }
  const BenchOptions& o_;
  std::map<std::string, std::pair<double, double>> last_;  // stage -> (flops, ms)
};

// Device bytes of the inputs Q, K and V, allocated once per shape.
std::size_t qkv_bytes(const AttentionProblem& p) {
  return static_cast<std::size_t>(p.q_elems() + 2 * p.kv_elems()) * fa::dtype_bytes(p.dtype);
}

// Measures one stage on one shape whose inputs are already on the device.
Row measure_point(const StageDemo& stage, const AttentionProblem& p, const fa::AttentionInputs& in,
                  const fa::DeviceTensors& inputs, const fa::DeviceInfo& device, const BenchOptions& o,
                  RepeatPlanner& planner) {
  Row r;
  r.name = stage.id;
  r.title = stage.title;
  r.p = p;
  if (!stage.runs_dim(p.dim)) {  // before the stage's models, which refuse that dim
    r.status = "skipped";
    r.note = "does not run d = " + std::to_string(p.dim);
    return r;
  }
  r.workspace_bytes = stage.workspace_bytes ? stage.workspace_bytes(p) : 0;
  const std::size_t need = fa::stage_run_bytes(stage, p);
  r.device_bytes = qkv_bytes(p) + need;
  r.hbm_model_bytes = stage.hbm_bytes ? stage.hbm_bytes(p) : 0.0;
  const fa::DeviceInfo now = fa::require_device();  // free memory with Q, K, V allocated
  if (!fa::fits(now, need)) {
    r.status = "skipped";
    r.note = "needs " + fa::format_bytes(static_cast<double>(need)) + " beyond Q, K, V; " +
             fa::format_bytes(static_cast<double>(now.free_bytes)) + " free";
    return r;
  }
  fa::DemoOptions opt;
  opt.check = !o.profile;
  opt.check_rows = o.check_rows;
  const auto [warmup, repeats] = planner.plan(stage.id, p);
  opt.warmup = o.profile ? 0 : warmup;
  opt.repeats = o.profile ? 0 : repeats;
  try {
    const fa::RunReport rep = fa::measure_stage(stage, p, in, inputs, device, opt);
    r.median_ms = rep.median_ms;
    r.repeats = rep.repeats;
    r.tflops = rep.repeats > 0 && rep.median_ms > 0 ? p.flops() / (rep.median_ms * 1e-3) / 1e12 : 0.0;
    if (const fa::NamedCheck* o_check = rep.check("O")) {
      r.max_abs_err = o_check->result.max_abs_err;
      r.checked_rows = rep.checked_count.second;
    }
    for (const fa::NamedCheck& c : rep.checks) {
      if (!c.passed() && r.note.empty()) r.note = c.name + ": " + fa::describe(c.result, c.namer);
    }
    r.status = !rep.checked ? "unchecked" : rep.passed() ? "passed" : "FAILED";
    planner.record(stage.id, p, r.median_ms);
  } catch (const fa::NoGpuError& e) {  // stage 08 on a GPU that is not a Hopper
    r.status = "skipped";
    r.note = e.what();
  } catch (const fa::CudaError& e) {
    // Out of memory despite the estimate is a skip; a fault that poisoned the context is not.
    cudaGetLastError();
    if (cudaDeviceSynchronize() != cudaSuccess) throw;
    r.status = "skipped";
    r.note = e.what();
  }
  return r;
}

std::string progress_line(const Row& r) {
  char buf[256];
  if (r.status == "skipped") {
    std::snprintf(buf, sizeof buf, "%-18s skipped: %s", r.name.c_str(), r.note.c_str());
  } else if (r.repeats == 0) {
    std::snprintf(buf, sizeof buf, "%-18s ran once (profile mode)", r.name.c_str());
  } else {
    const std::string rate = fa::is_cpu_backend() ? "(CPU backend)" : num(r.tflops, "%.2f") + " TFLOP/s";
    std::snprintf(buf, sizeof buf, "%-18s %10.3f ms %15s  max err %-9s %s", r.name.c_str(), r.median_ms,
                  rate.c_str(), r.max_abs_err >= 0 ? num(r.max_abs_err, "%.2e").c_str() : "-", r.status.c_str());
  }
  return buf;
}

int run(int argc, const char* const* argv) {
  const bool cpu = fa::is_cpu_backend();
  BenchOptions o;
  if (cpu) {  // every CUDA thread is a fiber on one core: keep the sweep small
    o.batch = 1, o.heads = 2, o.dims = {64}, o.seqs = {64, 128, 256};
    o.warmup = 0, o.repeats = 1, o.min_repeats = 1;
  }
  fa::ArgParser parser(argv[0], std::string("Benchmarks every stage") + (cpu ? "" : " and a cuBLAS baseline") +
                                    " over a sweep of sequence lengths, on the same inputs, and writes "
                                    "CSV and JSON rows." +
                                    (cpu ? "\nCPU backend: the times measure the simulator, not a GPU." : ""));
  parser.add_int("batch", &o.batch, "batch size B");
  parser.add_int("heads", &o.heads, "heads per batch entry H");
  parser.add_int_list("dim", &o.dims, "head dimensions d to sweep (16, 32, 64, 128)");
  parser.add_int_list("seq", &o.seqs, "sequence lengths N to sweep (Nq = Nkv = N)");
  parser.add_string("stages", &o.stages, "comma-separated stage names, or all (see --list)", "NAMES");
  parser.add_int("warmup", &o.warmup, "untimed runs before timing (fewer for slow points)", 0);
  parser.add_int("repeats", &o.repeats, "most timed runs per point; the median is reported");
  parser.add_int("min-repeats", &o.min_repeats, "fewest timed runs per point, however slow");
  parser.add_real("seconds", &o.seconds, "timed seconds per point the repeat count aims for", 0.0, 3600.0);
  parser.add_int("check-rows", &o.check_rows, "query rows checked against the float64 reference per point");
  parser.add_uint("seed", &o.seed, "seed of the random inputs");
  parser.add_string("precisions", &o.precisions,
                    "comma-separated element types (fp32, fp16, bf16); each stage runs in those it supports", "LIST");
  parser.add_switch("causal", &o.causal, "causal mask (query i sees keys j <= i)");
  parser.add_string("csv", &o.csv, "write the rows as CSV to FILE", "FILE");
  parser.add_string("json", &o.json, "write the rows as JSON to FILE", "FILE");
  parser.add_switch("profile", &o.profile, "run each stage once per point, untimed and unchecked (for ncu)");
  parser.add_switch("list", &o.list, "list the stages and exit");
  if (!parser.parse(argc, argv)) return fa::kExitPassed;

  const std::vector<StageDemo> stages = select_stages(o.stages);
  if (o.list) {
    for (const StageDemo& s : stages) {  // id, the precisions it runs in (first: its default), title
      std::string types;
      for (fa::DType t : s.dtypes) types += (types.empty() ? "" : ",") + std::string(fa::dtype_name(t));
      std::cout << s.id << "  " << types << "  " << s.title << "\n";
    }
    return fa::kExitPassed;
  }
  if (o.min_repeats > o.repeats) throw fa::UsageError("--min-repeats must not exceed --repeats");
  std::vector<fa::DType> precisions;
  {
    std::stringstream in(o.precisions);
    std::string name;
    while (std::getline(in, name, ',')) {
      fa::DType t;
      if (!fa::parse_dtype(name, &t)) throw fa::UsageError("--precisions: unknown type '" + name + "' (fp32, fp16, bf16)");
      precisions.push_back(t);
    }
  }
  // The (stage, precision) pairs to measure: each stage in every chosen type it runs in.
  std::vector<std::pair<fa::DType, const StageDemo*>> runs;
  for (fa::DType t : precisions) {
    for (const StageDemo& s : stages) {
      if (s.runs_in(t) && s.causal_ok(fa::make_problem(1, 1, 1, 1, 64, 0.0, o.causal))) runs.push_back({t, &s});
    }
  }
  if (runs.empty()) throw fa::UsageError("no chosen stage runs in the chosen --precisions (with --causal, if given)");
  std::vector<AttentionProblem> shapes;  // validate every shape before any work
  for (int64_t d : o.dims) {
    for (int64_t n : o.seqs) shapes.push_back(fa::make_problem(o.batch, o.heads, n, n, d, 0.0, o.causal));
  }

  Context ctx;
  try {
    ctx.device = fa::require_device();
  } catch (const fa::NoGpuError& e) {
    throw fa::NoGpuError(std::string("fa_bench measures GPU kernels, and ") + e.what());
  }
  ctx.cuda = cuda_version();
  ctx.date = utc_now();
  for (int i = 0; i < argc; ++i) ctx.command += (i ? " " : "") + std::string(argv[i]);

  std::ofstream csv;
  if (!o.csv.empty()) {
    csv.open(o.csv);
    if (!csv) throw fa::InputError(o.csv + ": cannot write");
    csv << kCsvHeader << "\n";
  }
  std::cout << "fa_bench on " << (cpu ? "the CPU backend (times are NOT GPU performance)" : ctx.device.name)
            << ", CUDA " << ctx.cuda << "; " << runs.size() << " (stage, precision) pairs x " << shapes.size()
            << " shapes"
            << (o.profile ? ", profile mode (one untimed pass each)" : "") << "\n";

  {  // A sweep that may take long says so first (the repeat count adapts, so this is a bound).
    double flop = 0;
    for (const AttentionProblem& p : shapes) flop += p.flops() * static_cast<double>(runs.size());
    const double rate = fa::conservative_flops_per_second(ctx.device);
    const double bound_s = flop * static_cast<double>(1 + o.warmup + o.repeats) / rate;
    if (bound_s > 60.0) {
      std::cout << "estimate: up to " << fa::format_duration(bound_s) << " at a conservative "
                << (rate >= 1e12 ? num(rate / 1e12, "%.2g") + " TFLOP/s" : num(rate / 1e6, "%.2g") + " MFLOP/s")
                << " for this device (repeats adapt to each point's time, so "
                << "usually far less); fewer --seq values, --dim values or --stages make it shorter\n";
    }
  }

  std::vector<Row> rows;
  bool all_passed = true;
  const auto emit = [&](Row r) {  // progress line, CSV line (flushed: a cut-off run keeps its rows)
    std::printf("  [%3zu/%zu] %s\n", rows.size() + 1, runs.size() * shapes.size(), progress_line(r).c_str());
    std::fflush(stdout);
    if (csv.is_open()) csv << csv_line(ctx, r) << "\n" << std::flush;
    all_passed = all_passed && r.status != "FAILED";
    rows.push_back(std::move(r));
  };
  RepeatPlanner planner(o);
  for (const AttentionProblem& shape : shapes) {
    for (fa::DType t : precisions) {
      AttentionProblem p = shape;
      p.dtype = t;
      std::vector<const StageDemo*> here;
      for (const auto& [rt, s] : runs) {
        if (rt == t) here.push_back(s);
      }
      if (here.empty()) continue;
      std::cout << "\n" << fa::describe(p) << "\n" << std::flush;
      const std::size_t qkv = qkv_bytes(p);
      if (!fa::fits(fa::require_device(), qkv)) {
        for (const StageDemo* s : here) {
          Row r;
          r.name = s->id, r.title = s->title, r.p = p, r.status = "skipped";
          r.note = "Q, K, V alone need " + fa::format_bytes(static_cast<double>(qkv));
          emit(r);
        }
        continue;
      }
      // The same draw for every precision (rounded to each): the stages see the same inputs.
      const fa::AttentionInputs in = fa::random_inputs(p, o.seed);
      const fa::DeviceInputs inputs = fa::upload_inputs(in.q, in.k, in.v, t);
      for (const StageDemo* s : here) emit(measure_point(*s, p, in, inputs.tensors(), ctx.device, o, planner));
    }
  }
  if (!o.json.empty()) write_json(o.json, ctx, rows);
  std::cout << "\n" << rows.size() << " rows" << (o.csv.empty() ? "" : ", CSV: " + o.csv)
            << (o.json.empty() ? "" : ", JSON: " + o.json) << (all_passed ? "" : "; some results FAILED the check")
            << "\n";
  return all_passed ? fa::kExitPassed : fa::kExitCheckFailed;
}

}  // namespace

/// fa_bench's entry point: parses the flags, runs the sweep, returns fa::ExitCode.
int main(int argc, char** argv) {
  return fa::run_guarded(argv[0], [&] { return run(argc, argv); });
}
