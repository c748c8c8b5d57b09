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
#include "common/json.h"
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

// Numbers go to the page with a float's full precision, and NaN and infinity as strings
// that the page reads back (JSON has neither).
constexpr fa::JsonFormat kPageFormat{9, true};

template <typename T>
void write_array(fa::JsonWriter& w, const T* x, std::size_t n) {
  w.begin_array();
  for (std::size_t i = 0; i < n; ++i) w.value(static_cast<double>(x[i]));
  w.end_array();
}

template <typename T>
void write_array(fa::JsonWriter& w, const std::vector<T>& x) {
  write_array(w, x.data(), x.size());
}

// `values` as rows of `d`: [[...], [...], ...].
template <typename T>
void write_rows(fa::JsonWriter& w, const std::vector<T>& values, int64_t d) {
  w.begin_array();
  for (std::size_t r = 0; r * static_cast<std::size_t>(d) < values.size(); ++r) {
    write_array(w, values.data() + r * static_cast<std::size_t>(d), static_cast<std::size_t>(d));
  }
  w.end_array();
}

// ---- stage 02: one row, value by value ---------------------------------------------------
void write_softmax_trace(fa::JsonWriter& w, const std::vector<float>& x) {
  w.begin_object().key("x");
  write_array(w, x);
  w.key("steps").begin_array();
  fa::online::Stats st = fa::online::empty_stats();
  for (const float xk : x) {
    const float m_new = fmaxf(st.m, xk);
    const float alpha = m_new == -INFINITY ? 1.0f : expf(st.m - m_new);  // exp(m_old − m_new)
    const float term = m_new == -INFINITY ? 0.0f : expf(xk - m_new);    // the new value's exp(x − m_new)
    fa::online::update(st, xk);  // the stage's own step: the function its kernel calls
    w.begin_object().field("x", xk).field("m", st.m).field("alpha", alpha).field("term", term).field("l", st.l);
    w.end_object();
  }
  std::vector<float> p(x.size());
  for (std::size_t k = 0; k < x.size(); ++k) p[k] = st.l > 0.0f ? expf(x[k] - st.m) / st.l : 0.0f;
  w.end_array().field("m", st.m).field("l", st.l).key("p");
  write_array(w, p);

  // The kernel on the same row: 256 threads, each folds its values, then the block merges.
  const auto n = static_cast<int64_t>(x.size());
  fa::DeviceBuffer<float> in(x), out(x.size()), m(1), l(1);
  fa::online::softmax_rows(in.data(), out.data(), m.data(), l.data(), 1, n);
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  w.key("kernel").begin_object().field("m", m.download()[0]).field("l", l.download()[0]).key("p");
  write_array(w, out.download());
  w.end_object();

  std::vector<double> rp(x.size());
  double rm = 0, rl = 0;
  fa::reference_softmax(x.data(), 1, n, rp.data(), &rm, &rl);
  w.key("reference").begin_object().field("m", rm).field("l", rl).key("p");
  write_array(w, rp);
  w.end_object().end_object();
}

// ---- stages 04 and 05: every block's events and values --------------------------------------
void write_blocks(fa::JsonWriter& w, const fa::AttentionProblem& p, bool q_tiles_in_grid) {
  const int64_t q_tiles = (p.seq_q + fa::flash2::Br - 1) / fa::flash2::Br;
  w.begin_array();
  for (const auto& [block, trace] : fa::trace::blocks()) {
    const int64_t bh = q_tiles_in_grid ? block / q_tiles : block;
    w.begin_object().field("block", block).field("batch", bh / p.heads).field("head", bh % p.heads);
    if (q_tiles_in_grid) w.field("q_tile", block % q_tiles);
    w.key("events").begin_array();
    for (const fa::trace::Event& e : trace.events) {
      w.begin_object().field("op", e.op);
      if (e.op == "load" || e.op == "store") {
        w.field("what", e.what).field("first", e.first).field("count", e.count);
      } else {
        w.field("j", e.j).field("i", e.i);
      }
      const auto step = trace.steps.find({e.j, e.i});
      if (e.op == "step" && step != trace.steps.end()) {
        w.key("rows").begin_object();
        for (const auto& [row, values] : step->second) {
          w.key(std::to_string(row)).begin_object();
          for (const auto& [name, v] : values) {
            w.key(name);
            if (v.size() == 1) {
              w.value(v[0]);
            } else {
              write_array(w, v);
            }
          }
          w.end_object();
        }
        w.end_object();
      }
      w.end_object();
    }
    w.end_array().end_object();
  }
  w.end_array();
}

void write_attention_runs(fa::JsonWriter& w, const fa::AttentionProblem& shape, uint64_t seed) {
  w.begin_array();
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
      w.begin_object().field("stage", stage).field("causal", causal).key("blocks");
      write_blocks(w, p, stage == "05_flash2");
      w.key("o");
      write_rows(w, o.download(), p.dim);
      if (stage == "04_flash1") {
        w.key("m");
        write_array(w, m.download());
        w.key("l");
        write_array(w, l.download());
      } else {
        w.key("lse");
        write_array(w, lse.download());
      }
      w.key("reference").begin_object().key("o");
      write_rows(w, ref.o, p.dim);
      w.key("m");
      write_array(w, ref.m);
      w.key("l");
      write_array(w, ref_l);
      w.key("lse");
      write_array(w, ref.lse);
      w.end_object().end_object();
    }
  }
  w.end_array();
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
  fa::JsonWriter w(json, kPageFormat);
  w.begin_object().field("format", 1).key("problem").begin_object();
  w.field("batch", p.batch).field("heads", p.heads).field("seq_q", p.seq_q).field("seq_kv", p.seq_kv);
  w.field("dim", p.dim).field("scale", p.scale).field("seed", seed).field("Br", fa::flash2::Br).field("Bc", fa::flash2::Bc);
  w.end_object().key("softmax");
  write_softmax_trace(w, row);
  w.key("runs");
  write_attention_runs(w, p, seed);
  w.end_object();
  json << "\n";

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
