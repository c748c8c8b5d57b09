/**
 * \file see_it_run_trace.cpp
 * \brief Runs stages 02, 04 and 05 on the CPU backend with their trace points on
 *        (common/trace.h) and writes what they did as JSON, for the "See it run" page.
 *
 * The trace holds, for a small problem with several tiles in each direction:
 * - stage 02's online softmax on one short row, value by value, through the stage's own
 *   update(); and the row as the stage's kernel computes it;
 * - stages 04 and 05, without and with the causal mask: every block's loads, stores,
 *   skipped tiles and, after each step, its rows' m, l and O (for stage 04, what HBM
 *   holds; for stage 05, what its registers hold); and the outputs;
 * - the float64 reference of every output.
 *
 * \code
 * see_it_run_trace --out DIR                  # DIR/trace.json and DIR/trace.js
 * see_it_run_trace --out DIR --seq-q 100 --seq-kv 200 --row=3,-1,0.5
 * \endcode
 * `cmake --workflow --preset see-it-run` builds it, runs it and puts the page beside the
 * trace: open build-see-it-run/see-it-run/see-it-run.html.
 */
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "common/cli.h"
#include "common/cuda_check.h"
#include "common/demo.h"
#include "common/device.h"
#include "common/device_buffer.h"
#include "common/errors.h"
#include "common/problem.h"
#include "common/random.h"
#include "common/reference.h"
#include "common/trace.h"
#include "stages/02_online_softmax/online_softmax.h"
#include "stages/04_flash1/flash1_attention.h"
#include "stages/05_flash2/flash2_attention.h"

namespace {

static_assert(fa::flash1::Br == fa::flash2::Br && fa::flash1::Bc == fa::flash2::Bc,
              "the page draws both stages' grids with one tile size");

// ---- a small JSON writer: numbers with a float's full precision ----------------------------
std::string num(double x) {
  if (std::isnan(x)) return "\"nan\"";
  if (std::isinf(x)) return x > 0 ? "\"inf\"" : "\"-inf\"";  // JSON has no infinity; the page reads these back
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", x);
  return buf;
}

template <typename T>
std::string array(const T* x, std::size_t n) {
  std::string s = "[";
  for (std::size_t i = 0; i < n; ++i) s += (i ? "," : "") + num(static_cast<double>(x[i]));
  return s + "]";
}

template <typename T>
std::string array(const std::vector<T>& x) {
  return array(x.data(), x.size());
}

// `values` as rows of `d`: [[...], [...], ...].
template <typename T>
std::string rows_of(const std::vector<T>& values, int64_t d) {
  std::string s = "[";
  for (std::size_t r = 0; r * static_cast<std::size_t>(d) < values.size(); ++r) {
    s += (r ? "," : "") + array(values.data() + r * static_cast<std::size_t>(d), static_cast<std::size_t>(d));
  }
  return s + "]";
}

std::string quoted(const std::string& s) { return "\"" + s + "\""; }

// ---- stage 02: one row, value by value ---------------------------------------------------
std::string softmax_trace(const std::vector<float>& x) {
  std::ostringstream s;
  s << "{\"x\":" << array(x) << ",\"steps\":[";
  fa::online::Stats st = fa::online::empty_stats();
  for (std::size_t k = 0; k < x.size(); ++k) {
    const float m_new = fmaxf(st.m, x[k]);
    const float alpha = m_new == -INFINITY ? 1.0f : expf(st.m - m_new);  // exp(m_old − m_new)
    const float term = m_new == -INFINITY ? 0.0f : expf(x[k] - m_new);   // the new value's exp(x − m_new)
    fa::online::update(st, x[k]);  // the stage's own step: the function its kernel calls
    s << (k ? "," : "") << "{\"x\":" << num(x[k]) << ",\"m\":" << num(st.m) << ",\"alpha\":" << num(alpha)
      << ",\"term\":" << num(term) << ",\"l\":" << num(st.l) << "}";
  }
  std::vector<float> p(x.size());
  for (std::size_t k = 0; k < x.size(); ++k) p[k] = st.l > 0.0f ? expf(x[k] - st.m) / st.l : 0.0f;
  s << "],\"m\":" << num(st.m) << ",\"l\":" << num(st.l) << ",\"p\":" << array(p);

  // The kernel on the same row: 256 threads, each folds its values, then the block merges.
  const auto n = static_cast<int64_t>(x.size());
  fa::DeviceBuffer<float> in(x), out(x.size()), m(1), l(1);
  fa::online::softmax_rows(in.data(), out.data(), m.data(), l.data(), 1, n);
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  s << ",\"kernel\":{\"m\":" << num(m.download()[0]) << ",\"l\":" << num(l.download()[0])
    << ",\"p\":" << array(out.download()) << "}";

  std::vector<double> rp(x.size());
  double rm = 0, rl = 0;
  fa::reference_softmax(x.data(), 1, n, rp.data(), &rm, &rl);
  s << ",\"reference\":{\"m\":" << num(rm) << ",\"l\":" << num(rl) << ",\"p\":" << array(rp) << "}}";
  return s.str();
}

// ---- stages 04 and 05: every block's events and values --------------------------------------
std::string blocks_json(const fa::AttentionProblem& p, bool q_tiles_in_grid) {
  const int64_t q_tiles = (p.seq_q + fa::flash2::Br - 1) / fa::flash2::Br;
  std::ostringstream s;
  s << "[";
  bool first_block = true;
  for (const auto& [block, trace] : fa::trace::blocks()) {
    const int64_t bh = q_tiles_in_grid ? block / q_tiles : block;
    s << (first_block ? "" : ",") << "{\"block\":" << block << ",\"batch\":" << bh / p.heads
      << ",\"head\":" << bh % p.heads;
    if (q_tiles_in_grid) s << ",\"q_tile\":" << block % q_tiles;
    s << ",\"events\":[";
    first_block = false;
    bool first_event = true;
    for (const fa::trace::Event& e : trace.events) {
      s << (first_event ? "" : ",") << "{\"op\":" << quoted(e.op);
      first_event = false;
      if (e.op == "load" || e.op == "store") {
        s << ",\"what\":" << quoted(e.what) << ",\"first\":" << e.first << ",\"count\":" << e.count;
      } else {
        s << ",\"j\":" << e.j << ",\"i\":" << e.i;
      }
      const auto step = trace.steps.find({e.j, e.i});
      if (e.op == "step" && step != trace.steps.end()) {
        s << ",\"rows\":{";
        bool first_row = true;
        for (const auto& [row, values] : step->second) {
          s << (first_row ? "" : ",") << "\"" << row << "\":{";
          first_row = false;
          bool first_value = true;
          for (const auto& [name, v] : values) {
            s << (first_value ? "" : ",") << quoted(name) << ":" << (v.size() == 1 ? num(v[0]) : array(v));
            first_value = false;
          }
          s << "}";
        }
        s << "}";
      }
      s << "}";
    }
    s << "]}";
  }
  return s.str() + "]";
}

std::string attention_runs(const fa::AttentionProblem& shape, uint64_t seed) {
  std::ostringstream s;
  s << "[";
  bool first = true;
  for (const bool causal : {false, true}) {
    fa::AttentionProblem p = shape;
    p.causal = causal;
    const fa::AttentionInputs in = fa::random_inputs(p, seed);
    const fa::DeviceBuffer<float> q(in.q), k(in.k), v(in.v);
    const auto q_elems = static_cast<std::size_t>(p.q_elems());
    const auto rows = static_cast<std::size_t>(p.rows());
    const fa::AttentionRows<double> ref = fa::reference_attention(p, in.q.data(), in.k.data(), in.v.data(),
                                                                  fa::all_rows(p));
    std::vector<double> ref_l(rows);
    for (std::size_t r = 0; r < rows; ++r) ref_l[r] = std::exp(ref.lse[r] - ref.m[r]);
    const std::string reference = "{\"o\":" + rows_of(ref.o, p.dim) + ",\"m\":" + array(ref.m) +
                                  ",\"l\":" + array(ref_l) + ",\"lse\":" + array(ref.lse) + "}";

    for (const std::string stage : {"04_flash1", "05_flash2"}) {
      fa::DeviceBuffer<float> o(q_elems), m(rows), l(rows), lse(rows);
      o.fill_bytes(0xff);  // poisoned: NaN wherever the kernel does not write
      fa::trace::start(p.seq_q);
      if (stage == "04_flash1") {
        fa::flash1::attention(p, q.data(), k.data(), v.data(), o.data(), m.data(), l.data());
      } else {
        fa::flash2::attention(p, q.data(), k.data(), v.data(), o.data(), lse.data());
      }
      FA_CUDA_CHECK(cudaDeviceSynchronize());
      s << (first ? "" : ",") << "{\"stage\":" << quoted(stage) << ",\"causal\":" << (causal ? "true" : "false")
        << ",\"blocks\":" << blocks_json(p, stage == "05_flash2") << ",\"o\":" << rows_of(o.download(), p.dim);
      if (stage == "04_flash1") {
        s << ",\"m\":" << array(m.download()) << ",\"l\":" << array(l.download());
      } else {
        s << ",\"lse\":" << array(lse.download());
      }
      s << ",\"reference\":" << reference << "}";
      first = false;
    }
  }
  return s.str() + "]";
}

int run(int argc, const char* const* argv) {
  std::string out_dir;
  std::vector<float> row = {2, 1, 4, 1.5f, 3};  // the posts' worked example
  int64_t batch = 1, heads = 2, seq_q = 160, seq_kv = 160, dim = 16;
  uint64_t seed = 2024;
  fa::ArgParser a(argv[0],
                  "Runs stages 02, 04 and 05 on the CPU backend with their trace points on and writes what every "
                  "block did as DIR/trace.json (and DIR/trace.js, the same for the page opened from the file "
                  "system).");
  a.add_string("out", &out_dir, "the directory to write to (created)", "DIR");
  a.add_int("batch", &batch, "batch size B");
  a.add_int("heads", &heads, "heads per batch entry H");
  a.add_int("seq-q", &seq_q, "query length Nq (at most 512)");
  a.add_int("seq-kv", &seq_kv, "key/value length Nkv (at most 512)");
  a.add_int("dim", &dim, "head dimension d (16, 32 or 64)");
  a.add_uint("seed", &seed, "seed of the random inputs");
  a.add_real_list("row", &row, "stage 02's row, comma-separated (1 to 64 values)");
  if (!a.parse(argc, argv)) return fa::kExitPassed;
  if (out_dir.empty()) throw fa::UsageError("--out DIR is required");
  if (seq_q > 512 || seq_kv > 512 || batch * heads > 8 || dim > 64) {
    throw fa::InputError("the trace is for small problems: Nq, Nkv <= 512, B·H <= 8, d <= 64");
  }
  const fa::AttentionProblem p = fa::make_problem(batch, heads, seq_q, seq_kv, dim);
  if (row.size() > 64) throw fa::UsageError("--row: give 1 to 64 values");
  if (!fa::is_cpu_backend()) throw fa::InputError("the tracer runs on the CPU backend only");

  std::ostringstream json;
  json << "{\"format\":1,\"problem\":{\"batch\":" << p.batch << ",\"heads\":" << p.heads << ",\"seq_q\":" << p.seq_q
       << ",\"seq_kv\":" << p.seq_kv << ",\"dim\":" << p.dim << ",\"scale\":" << num(p.scale) << ",\"seed\":" << seed
       << ",\"Br\":" << fa::flash2::Br << ",\"Bc\":" << fa::flash2::Bc << "}"
       << ",\"softmax\":" << softmax_trace(row) << ",\"runs\":" << attention_runs(p, seed) << "}\n";

  std::filesystem::create_directories(out_dir);
  const auto write = [](const std::string& path, const std::string& text) {
    std::ofstream f(path);
    f << text;
    if (!f) throw fa::InputError(path + ": cannot write");
  };
  write(out_dir + "/trace.json", json.str());
  // A page opened from the file system may not fetch() a file beside it, but may run a script.
  write(out_dir + "/trace.js", "window.FA_TRACE = " + json.str());
  std::cout << "wrote " << out_dir << "/trace.json and trace.js (" << json.str().size() / 1024 << " KiB)\n";
  return fa::kExitPassed;
}

}  // namespace

/// Writes the trace, with the shared error handling.
int main(int argc, char** argv) {
  return fa::run_guarded(argv[0], [&] { return run(argc, argv); });
}
