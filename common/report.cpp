#include "common/report.h"

#include <cstdio>

#include "common/json.h"

namespace fa {

namespace {

std::string fixed(double x, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, x);
  return buf;
}

bool on_cpu(const RunReport& r) { return r.device.backend == "cpu"; }

std::string device_label(const RunReport& r) {
  return on_cpu(r) ? "CPU backend" : "GPU: " + r.device.name;
}

// The first headline metric of `r`: what the --compare table shows beside the time.
const Metric* headline(const RunReport& r) {
  for (const Metric& m : r.metrics) {
    if (m.headline) return &m;
  }
  return nullptr;
}

// The --compare table: this stage first, then each compared one.
void print_compare_table(std::ostream& out, const RunReport& r) {
  const Metric* head = headline(r);
  const std::string rate = head && !on_cpu(r) ? head->unit : "";
  out << "  side by side, same inputs (time: a multiple of the first row's; workspace: beyond inputs and outputs):\n";
  char buf[256];
  std::snprintf(buf, sizeof buf, "    %-28s %5s %11s %8s %9s %12s %12s  %s\n", "stage", "dtype", "median ms", "time",
                rate.c_str(), "workspace", "HBM model", "check");
  out << buf;
  std::vector<const RunReport*> rows = {&r};
  for (const RunReport& c : r.compared) rows.push_back(&c);
  for (const RunReport* c : rows) {
    const Metric* m = head ? c->metric(head->key) : nullptr;
    const std::string value = rate.empty() ? "" : (m && m->value ? fixed(*m->value, m->digits) : "-");
    const std::string times = r.median_ms > 0 ? fixed(c->median_ms / r.median_ms, 2) + "x" : "-";
    std::snprintf(buf, sizeof buf, "    %-28s %5s %11.3f %8s %9s %12s %12s  %s\n", c->stage.c_str(), dtype_name(c->dtype),
                  c->median_ms, times.c_str(), value.c_str(), format_bytes(static_cast<double>(c->workspace_bytes)).c_str(),
                  c->hbm_model_bytes > 0 ? format_bytes(c->hbm_model_bytes).c_str() : "-", c->verdict());
    out << buf;
  }
  for (const std::string& s : r.skipped) out << "    skipped " << s << "\n";
}

void write_json(JsonWriter& w, const JsonScalar& v) {
  std::visit([&w](const auto& x) { w.value(x); }, v);
}

}  // namespace

bool RunReport::passed() const {
  for (const NamedCheck& c : checks) {
    if (!c.passed()) return false;
  }
  for (const RunReport& r : compared) {
    if (!r.passed()) return false;
  }
  return true;
}

const NamedCheck* RunReport::check(const std::string& name) const {
  for (const NamedCheck& c : checks) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

const Metric* RunReport::metric(const std::string& key) const {
  for (const Metric& m : metrics) {
    if (m.key == key) return &m;
  }
  return nullptr;
}

const char* RunReport::verdict() const {
  if (!checked) return "UNCHECKED";
  for (const NamedCheck& c : checks) {
    if (!c.passed()) return "FAILED";
  }
  return "PASSED";
}

void print_report(std::ostream& out, const RunReport& r) {
  const bool cpu = on_cpu(r);
  const auto line = [&](const std::string& key, const std::string& value) {
    out << "  " << key << std::string(key.size() < 12 ? 12 - key.size() : 1, ' ') << value << "\n";
  };
  out << "stage " << r.stage << ": " << r.title << "\n";
  line("device", cpu ? r.device.name + ": timings are not GPU performance"
                     : r.device.name + " (sm_" + std::to_string(r.device.cc_major) +
                           std::to_string(r.device.cc_minor) + ", " + std::to_string(r.device.sm_count) + " SMs)");
  line("shape", r.shape);
  for (const auto& [key, value] : r.notes) line(key, value);
  line("workspace", format_bytes(static_cast<double>(r.workspace_bytes)) +
                        " of device memory beyond the inputs and outputs");
  if (r.hbm_model_bytes > 0) line("HBM model", format_bytes(r.hbm_model_bytes) + " moved per pass by the IO model");
  if (r.repeats > 0) {
    line("time", "median " + fixed(r.median_ms, 3) + " ms over " + std::to_string(r.repeats) + " runs (" +
                     std::to_string(r.warmup) + " warm-up)" + (cpu ? " on the CPU backend" : ""));
    for (const Metric& m : r.metrics) {
      if (m.value) line(m.label, fixed(*m.value, m.digits) + " " + m.unit + (m.note.empty() ? "" : " " + m.note));
    }
  }
  if (r.checked) {
    line("check", r.checked_what + " against the float64 CPU reference");
    for (const NamedCheck& c : r.checks) line(c.name, describe(c.result, c.namer));
  } else {
    line("check", "skipped (--no-check)");
  }
  if (!r.compared.empty() || !r.skipped.empty()) print_compare_table(out, r);
  out << summary_line(r) << "\n";
}

void print_report_json(std::ostream& out, const RunReport& r) {
  JsonWriter w(out);
  w.begin_object();
  w.field("stage", r.stage).field("backend", r.device.backend).field("device", r.device.name);
  for (const auto& [key, value] : r.fields) {
    w.key(key);
    write_json(w, value);
  }
  w.field("dtype", dtype_name(r.dtype));
  w.field("median_ms", r.median_ms).field("warmup", r.warmup).field("repeats", r.repeats);
  for (const Metric& m : r.metrics) w.field(m.key, m.value);
  w.field("workspace_bytes", static_cast<uint64_t>(r.workspace_bytes)).field("hbm_model_bytes", r.hbm_model_bytes);
  if (!r.notes.empty()) {
    w.key("notes").begin_object();
    for (const auto& [key, value] : r.notes) w.field(key, value);
    w.end_object();
  }
  if (r.checked) {
    w.field(r.checked_count.first, r.checked_count.second);
    w.key("checks").begin_object();
    for (const NamedCheck& c : r.checks) {
      w.key(c.name).begin_object();
      w.field("max_abs_err", c.result.max_abs_err).field("max_rel_err", c.result.max_rel_err);
      w.field("rel_l2_err", c.result.rel_l2_err).field("failures", c.result.failures);
      w.field("passed", c.passed()).end_object();
    }
    w.end_object();
  }
  w.field("result", r.verdict());
  w.end_object();
  out << "\n";
  for (const RunReport& c : r.compared) print_report_json(out, c);
}

std::string summary_line(const RunReport& r) {
  std::string s = r.stage + ": " + r.verdict() + "  " + fixed(r.median_ms, 3) + " ms";
  for (const Metric& m : r.metrics) {
    if (m.headline && m.value) s += "  " + fixed(*m.value, m.digits) + " " + m.unit;
  }
  s += "  [" + r.shape + "]  [" + device_label(r) + "]";
  for (const RunReport& c : r.compared) s += "  | " + c.stage + ": " + c.verdict() + " " + fixed(c.median_ms, 3) + " ms";
  return s;
}

}  // namespace fa
