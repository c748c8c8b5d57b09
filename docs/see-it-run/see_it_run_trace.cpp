/**
 * \file see_it_run_trace.cpp
 * \brief Runs stages 02 and 04-10 on the CPU backend with their trace points on
 *        (common/trace.h) and writes what they did as JSON, for the "See it run" page.
 *
 * The trace holds, for a small problem with several tiles in each direction:
 * - stage 02's online softmax on one short row, value by value, through the stage's own
 *   update(); and the row as the stage's kernel computes it;
 * - stages 04 and 05, without and with the causal mask: every block's loads, stores,
 *   skipped tiles and, after each step, its rows' m, l and O (for stage 04, what HBM
 *   holds; for stage 05, what its registers hold); and the outputs;
 * - the float64 reference of every output, and each run's IO-model bytes;
 * - stage 06 (fp16, d = 64): warp 0's fragments on its first K/V tile, lane by lane;
 * - stage 07 (fp16, d = 64), finished and without the swizzle: its first K tile as it lies
 *   in shared memory and warp 0's first ldmatrix of K; finished and without the prefetch:
 *   block 0's copies, commits, waits, barriers and compute, in program order;
 * - stage 08 (fp16, d = 64): block 0's ring of K/V slots, step by step, as its producer and
 *   its two consumers ran on the CPU backend;
 * - stage 09 (fp32) on a ragged batch: each split block's keys, its warps' (m, l), its own
 *   (m, l) and partial O, and the merge kernel's (m, l) and output;
 * - stage 10 (fp32, causal): every tile pair's P, dP and dS, the block's dK_j and dV_j after
 *   it, and what it added to dQ_i.
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
#include "common/decode_problem.h"
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
#include "stages/06_tensor_cores/tensor_core_attention.h"
#include "stages/07_memory_pipeline/pipelined_attention.h"
#include "stages/07_memory_pipeline/tuning.h"
#include "stages/08_hopper/hopper_attention.h"
#include "stages/08_hopper/tuning.h"
#include "stages/09_split_kv_decoding/split_kv_decoding.h"
#include "stages/10_backward/backward_attention.h"

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
      // The IO model's bytes (the stage's hbm_bytes_model: every tile, as without the mask).
      const double model = stage == "04_flash1" ? fa::flash1::hbm_bytes_model(p) : fa::flash2::hbm_bytes_model(p);
      w.begin_object().field("stage", stage).field("causal", causal).field("model_bytes", model).key("blocks");
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

// ---- stages 06 and 07: one warp's fragments, one tile's layout ------------------------------

// Rows [0, rows) of head 0 of x ([.., n, d]), d values a row.
std::vector<float> head_rows(const std::vector<float>& x, int64_t rows, int64_t d) {
  return std::vector<float>(x.begin(), x.begin() + rows * d);
}

// Each name's records, lane by lane: {name: [{offset, values}, ... 32]}.
void write_lanes(fa::JsonWriter& w, const std::vector<std::string>& names) {
  w.begin_object();
  for (const std::string& name : names) {
    const auto found = fa::trace::lanes().find(name);
    if (found == fa::trace::lanes().end() || found->second.size() != 32) {
      throw fa::InputError("the trace has no full warp of '" + name + "'");
    }
    w.key(name).begin_array();
    for (const auto& [lane, rec] : found->second) {
      w.begin_object().field("lane", lane).field("offset", rec.offset).key("values");
      write_array(w, rec.values);
      w.end_object();
    }
    w.end_array();
  }
  w.end_object();
}

// The tensors as the kernel saw them: rounded to `t`, widened back to float.
struct RoundedInputs {
  fa::DeviceInputs device;
  std::vector<float> q, k, v;
};
RoundedInputs rounded_inputs(const fa::AttentionProblem& p, uint64_t seed) {
  const fa::AttentionInputs in = fa::random_inputs(p, seed);
  RoundedInputs r{fa::upload_inputs(in.q, in.k, in.v, p.dtype), {}, {}, {}};
  r.q = fa::download_as_float(r.device.q.data(), in.q.size(), p.dtype);
  r.k = fa::download_as_float(r.device.k.data(), in.k.size(), p.dtype);
  r.v = fa::download_as_float(r.device.v.data(), in.v.size(), p.dtype);
  return r;
}

// Stage 06 on one head of 64 × 64 at d = 64, fp16: what warp 0 of block 0 held on its first
// K/V tile: the fragments ldmatrix gave it (with the offsets each lane handed it), S, each
// lane's part of a row's max and the max over its quad, P, and P as an A operand.
void write_fragments(fa::JsonWriter& w, uint64_t seed) {
  fa::AttentionProblem p = fa::make_problem(1, 1, 64, 64, 64);
  p.dtype = fa::DType::F16;
  const RoundedInputs in = rounded_inputs(p, seed);
  fa::DeviceBuffer<unsigned char> o(static_cast<std::size_t>(p.q_elems()) * 2);
  fa::trace::start(p.seq_q);
  fa::tensor_core::attention(p, in.device.q.data(), in.device.k.data(), in.device.v.data(), o.data(), nullptr);
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  const auto& s = fa::trace::lanes().at("S");
  const int64_t bc = static_cast<int64_t>(s.begin()->second.values.size()) * 2;  // Bc/8 fragments of 4 a lane
  constexpr float kLog2e = 1.4426950408889634f;
  w.begin_object().field("stage", "06_tensor_cores").field("dtype", "fp16").field("dim", p.dim).field("Bc", bc);
  w.field("stride", p.dim + 8).field("scale_log2", p.scale * kLog2e);
  w.key("q");  // the Q tile's rows of warp 0, K's first tile, V's first 16 rows
  write_rows(w, head_rows(in.q, 16, p.dim), p.dim);
  w.key("k");
  write_rows(w, head_rows(in.k, bc, p.dim), p.dim);
  w.key("v");
  write_rows(w, head_rows(in.v, 16, p.dim), p.dim);
  w.key("lanes");
  write_lanes(w, {"A = Q", "B = K", "S", "row max g", "row max g+8", "P", "A = P", "B = V"});
  w.end_object();
}

// Runs stage 07's variant `name` on `in` with the trace on (fp16; O is thrown away).
void run_stage07_traced(const fa::AttentionProblem& p, const RoundedInputs& in, const std::string& name) {
  fa::DeviceBuffer<unsigned char> o(static_cast<std::size_t>(p.q_elems()) * 2);
  fa::DeviceTensors t = in.device.tensors();
  t.o = o.data();
  fa::trace::start(p.seq_q);
  fa::find_variant(fa::pipeline::variants(), name, "stage 07").run(p, t, nullptr);
  FA_CUDA_CHECK(cudaDeviceSynchronize());
}

// Stage 07 at d = 64, fp16, with and without the XOR swizzle: its first K tile as it lies in
// shared memory, which of K's 16-byte chunks each place holds, and the row addresses of
// warp 0's first ldmatrix of K.
void write_swizzle(fa::JsonWriter& w, uint64_t seed) {
  fa::AttentionProblem p = fa::make_problem(1, 1, 128, 128, 64);
  p.dtype = fa::DType::F16;
  const RoundedInputs in = rounded_inputs(p, seed);
  const int64_t bc = fa::pipeline::key_tile_rows(p.dim);
  if (p.seq_kv < bc) throw fa::InputError("the swizzle view needs a full K tile");
  w.begin_array();
  for (const std::string name : {"no_swizzle", "tuned"}) {
    run_stage07_traced(p, in, name);
    const std::vector<double>& tile = fa::trace::tiles().at("K");
    // Which chunk of K (row, chunk) each 16-byte place of the tile holds: found by its
    // values, which are random and distinct, so each place matches exactly one chunk.
    const int64_t chunks = p.dim / 8;
    w.begin_object().field("variant", name).field("dim", p.dim).field("rows", bc).key("places").begin_array();
    for (int64_t place = 0; place < bc * chunks; ++place) {
      int64_t found = -1, matches = 0;
      for (int64_t c = 0; c < bc * chunks; ++c) {
        bool same = true;
        for (int64_t e = 0; e < 8 && same; ++e) {
          same = tile[static_cast<std::size_t>(place * 8 + e)] == in.k[static_cast<std::size_t>(c * 8 + e)];
        }
        if (same) found = c, ++matches;
      }
      if (matches != 1) throw fa::InputError("the swizzle view: a chunk of the K tile matches " +
                                             std::to_string(matches) + " chunks of K");
      w.begin_array().value(found / chunks).value(found % chunks).end_array();
    }
    w.end_array().key("k");  // K's first 16 rows, which warp 0's first ldmatrix of K reads
    write_rows(w, head_rows(in.k, 16, p.dim), p.dim);
    w.key("lanes");
    write_lanes(w, {"B = K"});
    w.end_object();
  }
  w.end_array();
}

// Stage 07 at d = 64, fp16, on one Q tile against 4 K/V tiles, finished and without the
// prefetch: block 0's pipeline steps in program order (its cp.async copies, commits, waits,
// barriers and the compute on each tile).
void write_pipeline(fa::JsonWriter& w, uint64_t seed) {
  fa::AttentionProblem p = fa::make_problem(1, 1, 128, 512, 64);
  p.dtype = fa::DType::F16;
  const RoundedInputs in = rounded_inputs(p, seed);
  w.begin_array();
  for (const std::string name : {"tuned", "no_prefetch"}) {
    run_stage07_traced(p, in, name);
    w.begin_object().field("variant", name).field("dim", p.dim).field("seq_q", p.seq_q).field("seq_kv", p.seq_kv);
    w.field("Bc", fa::pipeline::key_tile_rows(p.dim)).key("events").begin_array();
    for (const fa::trace::Event& e : fa::trace::blocks().at(0).events) {
      w.begin_object().field("op", e.op);
      if (e.op == "copy") w.field("what", e.what).field("first", e.first).field("count", e.count).field("buffer", e.j);
      if (e.op == "wait") w.field("n", e.count);
      if (e.op == "compute") w.field("what", e.what).field("tile", e.first).field("buffer", e.j);
      w.end_object();
    }
    w.end_array().end_object();
  }
  w.end_array();
}

// Stage 08 at d = 64, fp16, on one Q tile of 128 rows against 5 K/V tiles: block 0's ring, as
// its producer and its two consumers stepped through it (the first thread of each warpgroup),
// in the order the CPU backend ran them.
void write_ring(fa::JsonWriter& w, uint64_t seed) {
  fa::AttentionProblem p = fa::make_problem(1, 1, 128, 640, 64);
  p.dtype = fa::DType::F16;
  const RoundedInputs in = rounded_inputs(p, seed);
  fa::DeviceBuffer<unsigned char> o(static_cast<std::size_t>(p.q_elems()) * 2);
  fa::trace::start(p.seq_q);
  fa::hopper::attention(p, in.device.q.data(), in.device.k.data(), in.device.v.data(), o.data());
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  w.begin_object().field("stage", "08_hopper").field("dim", p.dim).field("seq_q", p.seq_q).field("seq_kv", p.seq_kv);
  w.field("Bc", fa::hopper::Bc).field("slots", fa::hopper::Tuned::stages).field("consumers", fa::hopper::consumers(p.dim));
  w.key("events").begin_array();
  for (const fa::trace::Event& e : fa::trace::blocks().at(0).events) {
    w.begin_object().field("warpgroup", e.i).field("op", e.op).field("what", e.what).field("slot", e.j);
    w.field("parity", e.count).field("tile", e.first).end_object();
  }
  w.end_array().end_object();
}

// ---- stage 09: a ragged batch's splits and their merge ---------------------------------------

// Keyed values of `name` under `key`, or an error naming what the trace lacks.
const std::vector<double>& keyed_at(const std::string& name, const std::vector<int64_t>& key) {
  const auto found = fa::trace::keyed().find(name);
  if (found == fa::trace::keyed().end() || found->second.count(key) == 0) {
    throw fa::InputError("the trace has no '" + name + "' under the key it needs");
  }
  return found->second.at(key);
}

// Stage 09 (fp32, d = 16) on two sequences of 400 and 150 keys, one new query each, cut into
// 3 splits for the longest: each split block's keys, its warps' (m, l), the block's (m, l)
// and unnormalised O, then the merge kernel's (m, l) and the output.
void write_split_kv(fa::JsonWriter& w, uint64_t seed) {
  const fa::DecodeProblem p = fa::make_decode_problem(2, 1, 1, 1, 400, {400, 150}, 16, 0.0, false, fa::DType::F32);
  const fa::decode::Plan plan = fa::decode::make_plan(p, 1, 3);
  const fa::AttentionInputs in = fa::random_decode_inputs(p, seed);
  const fa::DeviceInputs dev = fa::upload_inputs(in.q, in.k, in.v, p.dtype);
  const std::vector<int> lens32(p.kv_lens.begin(), p.kv_lens.end());
  const fa::DeviceBuffer<int> lens(lens32);
  fa::DeviceBuffer<float> o(static_cast<std::size_t>(p.q_elems())), lse(static_cast<std::size_t>(p.rows()));
  fa::DeviceBuffer<unsigned char> workspace(fa::decode::workspace_bytes(p, plan));
  o.fill_bytes(0xff);
  fa::trace::start(p.rows());
  fa::decode::attention(p, plan, dev.q.data(), dev.k.data(), dev.v.data(), lens.data(), o.data(), lse.data(),
                        workspace.data());
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> out = o.download();
  const fa::AttentionRows<double> ref = fa::reference_decode(p, in.q.data(), in.k.data(), in.v.data(), {0, 1});

  w.begin_object().field("stage", "09_split_kv_decoding").field("dtype", "fp32").field("dim", p.dim);
  w.field("scale", p.scale).field("chunk", plan.chunk).field("warps", fa::decode::WARPS).key("sequences").begin_array();
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t len = p.kv_lens[static_cast<std::size_t>(b)];
    const auto head = static_cast<std::size_t>(b * p.max_seq_kv * p.dim);  // Hkv = 1: sequence b's cache
    w.begin_object().field("length", len).key("q");
    write_array(w, in.q.data() + b * p.dim, static_cast<std::size_t>(p.dim));
    w.key("k");
    write_rows(w, std::vector<float>(in.k.begin() + head, in.k.begin() + head + len * p.dim), p.dim);
    w.key("v");
    write_rows(w, std::vector<float>(in.v.begin() + head, in.v.begin() + head + len * p.dim), p.dim);
    w.key("splits").begin_array();
    for (int64_t y = 0; y < plan.chunks; ++y) {  // the blocks of this sequence, in grid order
      const std::vector<double>& split = keyed_at("split", {y});  // {b, split, begin, end, WARP_KEYS}
      if (static_cast<int64_t>(split[0]) != b) continue;
      w.begin_object().field("block", y).field("split", split[1]).field("begin", split[2]).field("end", split[3]);
      w.field("warp_keys", split[4]).key("warp_m");
      write_array(w, keyed_at("warp m", {y, b}));
      w.key("warp_l");
      write_array(w, keyed_at("warp l", {y, b}));
      const std::vector<double>& part = keyed_at("part", {y, b});
      w.field("m", part[0]).field("l", part[1]).key("o");
      write_array(w, keyed_at("part o", {y, b}));
      w.end_object();
    }
    const std::vector<double>& merged = keyed_at("merged", {b});
    w.end_array().key("merged").begin_object().field("m", merged[0]).field("l", merged[1]).end_object().key("o");
    write_array(w, out.data() + b * p.dim, static_cast<std::size_t>(p.dim));
    w.key("reference").begin_object().key("o");
    write_array(w, ref.o.data() + b * p.dim, static_cast<std::size_t>(p.dim));
    w.field("m", ref.m[static_cast<std::size_t>(b)]).field("lse", ref.lse[static_cast<std::size_t>(b)]);
    w.end_object().end_object();
  }
  w.end_array().end_object();
}

// ---- stage 10: the tile pairs of the backward pass ---------------------------------------------

// Stage 10 (fp32, d = 16, causal) on one head of 80 queries and 80 keys: two K/V tiles, each a
// block, and two Q tiles. For every tile pair a block visits: P, dP and dS, the block's dV_j
// and dK_j after it, and what it added to dQ_i.
void write_backward(fa::JsonWriter& w, uint64_t seed) {
  fa::AttentionProblem p = fa::make_problem(1, 1, 80, 80, 16);
  p.causal = true;
  const fa::AttentionInputs in = fa::random_inputs(p, seed);
  const std::vector<float> d_o = fa::random_output_gradient(p, seed);
  // The forward's O and log-sum-exp, as the backward receives them: float64, rounded to float.
  const fa::AttentionRows<double> fwd = fa::reference_attention(p, in.q.data(), in.k.data(), in.v.data(), fa::all_rows(p));
  const std::vector<float> o(fwd.o.begin(), fwd.o.end()), lse(fwd.lse.begin(), fwd.lse.end());
  const fa::DeviceBuffer<float> q(in.q), k(in.k), v(in.v), o_dev(o), do_dev(d_o), lse_dev(lse);
  fa::DeviceBuffer<float> dq(in.q.size()), dk(in.k.size()), dv(in.v.size());
  fa::DeviceBuffer<unsigned char> workspace(fa::backward::workspace_bytes(p));
  dq.fill_bytes(0xff), dk.fill_bytes(0xff), dv.fill_bytes(0xff);
  fa::trace::start(p.seq_q);
  fa::backward::attention_backward(p, {q.data(), k.data(), v.data(), o_dev.data(), do_dev.data(), lse_dev.data(),
                                       dq.data(), dk.data(), dv.data()}, workspace.data());
  FA_CUDA_CHECK(cudaDeviceSynchronize());

  using fa::backward::Bc;
  using fa::backward::Br;
  w.begin_object().field("stage", "10_backward").field("dtype", "fp32").field("dim", p.dim).field("seq_q", p.seq_q);
  w.field("seq_kv", p.seq_kv).field("causal", p.causal).field("scale", p.scale).field("Br", Br).field("Bc", Bc);
  const std::pair<const char*, const std::vector<float>*> tensors[] = {{"q", &in.q}, {"k", &in.k}, {"v", &in.v},
                                                                       {"o", &o}, {"do", &d_o}};
  for (const auto& [name, x] : tensors) {
    w.key(name);
    write_rows(w, *x, p.dim);
  }
  w.key("lse");
  write_array(w, lse);
  w.key("D").begin_array();  // kernel 1's rowsum(dO ∘ O)
  for (int64_t r = 0; r < p.seq_q; ++r) w.value(keyed_at("D", {r})[0]);
  w.end_array().key("pairs").begin_array();
  // The pairs each block visited, in its loop's order: those with a row of P recorded.
  const auto& p_rows = fa::trace::keyed().at("P");
  std::vector<std::pair<int64_t, int64_t>> pairs;  // (block, i0)
  for (const auto& [key, values] : p_rows) {
    if (key[2] == 0) pairs.emplace_back(key[0], key[1]);
  }
  for (const auto& [block, i0] : pairs) {
    const int64_t j0 = block * Bc, rows = std::min<int64_t>(Br, p.seq_q - i0), keys = std::min<int64_t>(Bc, p.seq_kv - j0);
    w.begin_object().field("block", block).field("j", j0).field("i", i0).field("rows", rows).field("keys", keys);
    for (const char* name : {"P", "dP", "dS", "dQ add"}) {  // a row of the Q tile each, its valid columns
      w.key(name).begin_array();
      for (int64_t r = 0; r < rows; ++r) {
        const std::vector<double>& row = keyed_at(name, {block, i0, r});
        write_array(w, row.data(), static_cast<std::size_t>(name == std::string("dQ add") ? p.dim : keys));
      }
      w.end_array();
    }
    for (const char* name : {"dV", "dK"}) {  // a key of the K/V tile each
      w.key(name).begin_array();
      for (int64_t c = 0; c < keys; ++c) write_array(w, keyed_at(name, {block, i0, c}));
      w.end_array();
    }
    w.end_object();
  }
  w.end_array();
  const std::pair<const char*, fa::DeviceBuffer<float>*> grads[] = {{"dq", &dq}, {"dk", &dk}, {"dv", &dv}};
  for (const auto& [name, x] : grads) {
    w.key(name);
    write_rows(w, x->download(), p.dim);
  }
  w.end_object();
}

int run(int argc, const char* const* argv) {
  std::string out_dir;
  std::vector<float> row = {2, 1, 4, 1.5f, 3};  // the posts' worked example
  int64_t batch = 1, heads = 2, seq_q = 160, seq_kv = 160, dim = 16;
  uint64_t seed = 2024;
  fa::ArgParser a(argv[0],
                  "Runs stages 02 and 04-10 on the CPU backend with their trace points on and writes what every "
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
  w.key("fragments");
  write_fragments(w, seed);
  w.key("swizzle");
  write_swizzle(w, seed);
  w.key("pipeline");
  write_pipeline(w, seed);
  w.key("ring");
  write_ring(w, seed);
  w.key("split_kv");
  write_split_kv(w, seed);
  w.key("backward");
  write_backward(w, seed);
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
