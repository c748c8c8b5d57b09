#include "common/report.h"

#include <cmath>
#include <cstdio>
#include <sstream>

#include "common/json.h"

namespace fa {

double RunReport::tflops() const {
  return median_ms > 0 ? problem.flops() / (median_ms * 1e-3) / 1e12 : 0.0;
}

double RunReport::effective_gbps() const {
  return median_ms > 0 ? static_cast<double>(problem.qkvo_bytes()) / (median_ms * 1e-3) / 1e9 : 0.0;
}

namespace {

std::string fixed(double x, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, x);
  return buf;
}

const char* verdict(const RunReport& r) {
  return !r.checked ? "UNCHECKED" : (r.check.passed() ? "PASSED" : "FAILED");
}

std::string device_label(const RunReport& r) {
  return r.device.backend == "cpu" ? "CPU backend" : "GPU: " + r.device.name;
}

}  // namespace

void print_report(std::ostream& out, const RunReport& r) {
  const bool cpu = r.device.backend == "cpu";
  const auto line = [&](const std::string& key, const std::string& value) {
    out << "  " << key << std::string(key.size() < 12 ? 12 - key.size() : 1, ' ') << value << "\n";
  };
  out << "stage " << r.stage << ": " << r.title << "\n";
  line("device", cpu ? r.device.name + " (CPU backend: timings are not GPU performance)"
                     : r.device.name + " (sm_" + std::to_string(r.device.cc_major) +
                           std::to_string(r.device.cc_minor) + ", " +
                           std::to_string(r.device.sm_count) + " SMs)");
  line("shape", describe(r.problem));
  line("Q,K,V,O", format_bytes(static_cast<double>(r.problem.qkvo_bytes())));
  line("workspace", format_bytes(static_cast<double>(r.workspace_bytes)) +
                        " of device memory beyond Q, K, V, O");
  if (r.hbm_model_bytes > 0) line("HBM model", format_bytes(r.hbm_model_bytes) + " moved per pass by the IO model");
  for (const auto& [key, value] : r.notes) line(key, value);
  if (r.repeats > 0) {
    line("time", "median " + fixed(r.median_ms, 3) + " ms over " + std::to_string(r.repeats) +
                     " runs (" + std::to_string(r.warmup) + " warm-up)" +
                     (cpu ? " on the CPU backend" : ""));
    if (!cpu) {
      line("throughput", fixed(r.tflops(), 2) + " TFLOP/s (4*B*H*Nq*Nkv*d), " +
                             fixed(r.effective_gbps(), 1) +
                             " GB/s effective (Q, K, V read + O written once)");
    }
  }
  if (r.checked) {
    line("check", std::to_string(r.check.rows.size()) + " of " + std::to_string(r.problem.rows()) +
                      " query rows against the float64 CPU reference");
    line("O", describe(r.check.o, output_namer(r.problem, r.check.rows)));
    if (r.check.has_lse) line("lse", describe(r.check.lse, row_namer(r.problem, r.check.rows, "lse")));
  } else {
    line("check", "skipped (--no-check)");
  }
  if (!r.compared.empty() || !r.skipped.empty()) {
    out << "  side by side, same inputs (median ms; workspace = device memory beyond Q, K, V, O):\n";
    char buf[256];
    std::snprintf(buf, sizeof buf, "    %-18s %5s %11s %9s %12s %12s  %s\n", "stage", "dtype", "median ms",
                  cpu ? "" : "TFLOP/s", "workspace", "HBM model", "check");
    out << buf;
    std::vector<const RunReport*> rows = {&r};
    for (const RunReport& c : r.compared) rows.push_back(&c);
    for (const RunReport* c : rows) {
      std::snprintf(buf, sizeof buf, "    %-18s %5s %11.3f %9s %12s %12s  %s\n", c->stage.c_str(),
                    dtype_name(c->problem.dtype), c->median_ms,
                    cpu ? "" : fixed(c->tflops(), 2).c_str(), format_bytes(static_cast<double>(c->workspace_bytes)).c_str(),
                    c->hbm_model_bytes > 0 ? format_bytes(c->hbm_model_bytes).c_str() : "-", verdict(*c));
      out << buf;
    }
    for (const std::string& s : r.skipped) out << "    skipped " << s << "\n";
  }
  out << summary_line(r) << "\n";
}

void print_report_json(std::ostream& out, const RunReport& r) {
  const AttentionProblem& p = r.problem;
  const bool cpu = r.device.backend == "cpu";
  JsonWriter w(out);
  w.begin_object();
  w.field("stage", r.stage).field("backend", r.device.backend).field("device", r.device.name);
  w.field("batch", p.batch).field("heads", p.heads).field("seq_q", p.seq_q).field("seq_kv", p.seq_kv);
  w.field("dim", p.dim).field("scale", p.scale).field("causal", p.causal).field("dtype", dtype_name(p.dtype));
  w.field("median_ms", r.median_ms).field("warmup", r.warmup).field("repeats", r.repeats);
  w.key("tflops");
  cpu ? w.null() : w.value(r.tflops());
  w.key("effective_gbps");
  cpu ? w.null() : w.value(r.effective_gbps());
  w.field("qkvo_bytes", static_cast<uint64_t>(p.qkvo_bytes())).field("workspace_bytes", static_cast<uint64_t>(r.workspace_bytes));
  w.field("hbm_model_bytes", r.hbm_model_bytes);
  if (r.checked) {
    w.field("rows_checked", static_cast<uint64_t>(r.check.rows.size())).field("max_abs_err", r.check.o.max_abs_err);
    w.field("max_rel_err", r.check.o.max_rel_err).field("rel_l2_err", r.check.o.rel_l2_err);
    w.field("failures", r.check.o.failures + (r.check.has_lse ? r.check.lse.failures : int64_t{0}));
  }
  for (const auto& [key, value] : r.notes) w.field(key, value);
  w.field("result", verdict(r));
  w.end_object();
  out << "\n";
}

std::string summary_line(const RunReport& r) {
  std::string s = r.stage + ": " + verdict(r) + "  " + fixed(r.median_ms, 3) + " ms";
  if (r.device.backend != "cpu") s += "  " + fixed(r.tflops(), 2) + " TFLOP/s";
  s += "  [" + describe(r.problem) + "]  [" + device_label(r) + "]";
  return s;
}

}  // namespace fa
