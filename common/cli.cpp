#include "common/cli.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <stdexcept>

#include "common/errors.h"

namespace fa {

ArgParser::ArgParser(std::string program, std::string summary)
    : program_(std::move(program)), summary_(std::move(summary)) {}

ArgParser::Option* ArgParser::find(const std::string& name) {
  for (Option& o : options_) {
    if (o.name == name) return &o;
  }
  return nullptr;
}

namespace {

// One integer of option `name`'s value `text`, at least `min`.
int64_t parse_int(const std::string& name, const std::string& text, int64_t min) {
  int64_t value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end) {
    throw UsageError("--" + name + ": expected an integer, got '" + text + "'");
  }
  if (value < min) {
    throw UsageError("--" + name + ": must be at least " + std::to_string(min) + ", got " + text);
  }
  return value;
}

}  // namespace

void ArgParser::add_int(const std::string& name, int64_t* target, const std::string& help,
                        int64_t min) {
  options_.push_back({name, help, "N", std::to_string(*target), true,
                      [=](const std::string& text) { *target = parse_int(name, text, min); }});
}

void ArgParser::add_int_list(const std::string& name, std::vector<int64_t>* target,
                             const std::string& help, int64_t min) {
  std::string def;
  for (int64_t v : *target) def += (def.empty() ? "" : ",") + std::to_string(v);
  options_.push_back({name, help, "N,N,...", def, true, [=](const std::string& text) {
                        std::vector<int64_t> values;
                        std::stringstream in(text);
                        std::string item;
                        while (std::getline(in, item, ',')) values.push_back(parse_int(name, item, min));
                        if (values.empty()) throw UsageError("--" + name + ": needs at least one value");
                        *target = values;
                      }});
}

void ArgParser::add_real_list(const std::string& name, std::vector<float>* target, const std::string& help) {
  std::ostringstream def;
  for (std::size_t i = 0; i < target->size(); ++i) def << (i ? "," : "") << (*target)[i];
  options_.push_back({name, help, "X,X,...", def.str(), true, [=](const std::string& text) {
                        std::vector<float> values;
                        std::stringstream in(text);
                        std::string item;
                        while (std::getline(in, item, ',')) {
                          char* end = nullptr;
                          const float v = std::strtof(item.c_str(), &end);
                          if (item.empty() || *end != '\0') {
                            throw UsageError("--" + name + ": '" + item + "' is not a number");
                          }
                          values.push_back(v);
                        }
                        if (values.empty()) throw UsageError("--" + name + ": needs at least one value");
                        *target = values;
                      }});
}

void ArgParser::add_uint(const std::string& name, uint64_t* target, const std::string& help) {
  options_.push_back({name, help, "N", std::to_string(*target), true,
                      [=](const std::string& text) {
                        uint64_t value = 0;
                        const char* end = text.data() + text.size();
                        auto [ptr, ec] = std::from_chars(text.data(), end, value);
                        if (ec != std::errc() || ptr != end) {
                          throw UsageError("--" + name + ": expected a non-negative integer, got '" +
                                           text + "'");
                        }
                        *target = value;
                      }});
}

void ArgParser::add_real(const std::string& name, double* target, const std::string& help,
                         double min, double max) {
  std::ostringstream def;
  def << *target;
  options_.push_back({name, help, "X", def.str(), true, [=](const std::string& text) {
                        char* end = nullptr;
                        const double value = std::strtod(text.c_str(), &end);
                        if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(value)) {
                          throw UsageError("--" + name + ": expected a number, got '" + text + "'");
                        }
                        if (value < min || value > max) {
                          std::ostringstream m;
                          m << "--" << name << ": must be in [" << min << ", " << max << "], got " << text;
                          throw UsageError(m.str());
                        }
                        *target = value;
                      }});
}

void ArgParser::add_switch(const std::string& name, bool* target, const std::string& help) {
  options_.push_back({name, help, "", *target ? "on" : "off", false,
                      [=](const std::string& text) { *target = (text == "1"); }});
}

void ArgParser::add_string(const std::string& name, std::string* target, const std::string& help,
                           const std::string& metavar) {
  options_.push_back({name, help, metavar, *target, true,
                      [=](const std::string& text) {
                        if (text.empty()) throw UsageError("--" + name + ": needs a value");
                        *target = text;
                      }});
}

void ArgParser::reword(const std::string& name, const std::string& help) {
  Option* o = find(name);
  if (!o) throw std::logic_error("reword: no option --" + name);
  o->help = help;
}

void ArgParser::remove(const std::string& name) {
  Option* o = find(name);
  if (!o) throw std::logic_error("remove: no option --" + name);
  options_.erase(options_.begin() + (o - options_.data()));
}

bool ArgParser::parse(int argc, const char* const* argv) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::cout << help();
      return false;
    }
    if (arg.rfind("--", 0) != 0) throw UsageError("unexpected argument '" + arg + "' (see --help)");
    std::string name = arg.substr(2), value;
    const size_t eq = name.find('=');
    const bool has_inline_value = eq != std::string::npos;
    if (has_inline_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    Option* opt = find(name);
    bool negated = false;
    if (!opt && name.rfind("no-", 0) == 0) {
      opt = find(name.substr(3));
      negated = opt && !opt->takes_value;
      if (!negated) opt = nullptr;
    }
    if (!opt) throw UsageError("unknown option '--" + name + "' (see --help)");
    if (opt->takes_value) {
      if (!has_inline_value) {
        if (i + 1 >= argc) throw UsageError("--" + name + ": needs a value");
        value = argv[++i];
      }
      opt->set(value);
    } else {
      if (has_inline_value) throw UsageError("--" + name + " takes no value");
      opt->set(negated ? "0" : "1");
    }
    opt->given = true;
  }
  return true;
}

bool ArgParser::given(const std::string& name) const {
  for (const Option& o : options_) {
    if (o.name == name) return o.given;
  }
  return false;
}

std::string ArgParser::help() const {
  std::ostringstream s;
  s << "usage: " << program_ << " [options]\n\n" << summary_ << "\n\noptions:\n";
  for (const Option& o : options_) {
    std::string left = "  --" + o.name + (o.takes_value ? " " + o.metavar : "");
    if (!o.takes_value) left = "  --[no-]" + o.name;
    s << left;
    s << std::string(left.size() < 26 ? 26 - left.size() : 1, ' ') << o.help;
    if (!o.default_text.empty()) s << " (default: " << o.default_text << ")";
    s << "\n";
  }
  s << "  --help                  show this help\n";
  return s.str();
}

DemoOptions default_demo_options(bool cpu_backend) {
  DemoOptions o;
  if (cpu_backend) {
    // Every CUDA thread is a fiber on one core: keep the default run to about a second.
    o.batch = 1, o.heads = 2, o.seq_q = 256, o.seq_kv = 256, o.dim = 64;
    o.warmup = 0, o.repeats = 1;
  } else {
    // The shape the seed posts benchmark: B=4, H=32, N=4096, d=64.
    o.batch = 4, o.heads = 32, o.seq_q = 4096, o.seq_kv = 4096, o.dim = 64;
  }
  return o;
}

void add_demo_options(ArgParser& p, DemoOptions& o, const std::vector<std::string>& leave_out) {
  p.add_int("batch", &o.batch, "batch size B");
  p.add_int("heads", &o.heads, "heads per batch entry H");
  p.add_int("seq-q", &o.seq_q, "query length Nq");
  p.add_int("seq-kv", &o.seq_kv, "key/value length Nkv");
  p.add_int("dim", &o.dim, "head dimension d (16, 32, 64 or 128)");
  p.add_real("scale", &o.scale, "softmax scale; 0 means 1/sqrt(d)", 0.0, 1e6);
  p.add_switch("causal", &o.causal, "causal mask (query i sees keys j <= i)");
  p.add_string("dtype", &o.dtype, "element type of Q, K, V, O: fp32, fp16 or bf16 (default: the stage's first)",
               "TYPE");
  p.add_uint("seed", &o.seed, "seed of the random inputs");
  p.add_real("magnitude", &o.magnitude, "inputs are uniform in [-X, X]", 1e-6, 1e6);
  p.add_int("warmup", &o.warmup, "untimed runs before timing", 0);
  p.add_int("repeats", &o.repeats, "timed runs; the median is reported");
  p.add_switch("check", &o.check, "compare with the float64 CPU reference");
  p.add_int("check-rows", &o.check_rows, "most query rows to check (spread over all heads)");
  p.add_switch("json", &o.json, "print the report as one JSON object");
  p.add_switch("brief", &o.brief, "print only the one-line summary");
  p.add_switch("compare", &o.compare, "also run earlier stages on the same inputs, side by side");
  p.add_switch("dry-run", &o.dry_run, "check the shape, say what it needs and how long it may take, run nothing");
  p.add_string("load", &o.load_dir, "read q.npy, k.npy, v.npy from DIR (sets the shape)", "DIR");
  p.add_string("save", &o.save_dir, "write q.npy, k.npy, v.npy, o.npy to DIR", "DIR");
  for (const std::string& name : leave_out) p.remove(name);
}

}  // namespace fa
