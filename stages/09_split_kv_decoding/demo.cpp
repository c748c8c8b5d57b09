/**
 * \file stages/09_split_kv_decoding/demo.cpp
 * \brief Stage 09's demo: one decode step (a few new queries per sequence against its KV
 *        cache), checked against the float64 reference and timed in TB/s of cache read.
 *
 * \code
 * stage09_split_kv_decoding                                   # B=1 Hq=Hkv=32 L=32768 d=128 fp16
 * stage09_split_kv_decoding --batch 16 --kv-heads 8           # grouped-query attention, G = 4
 * stage09_split_kv_decoding --batch 3 --kv-lens 1,900,4096 --seq-kv 4096   # a ragged batch
 * stage09_split_kv_decoding --seq-q 4 --causal                # 4 new queries, bottom-right mask
 * stage09_split_kv_decoding --compare                         # beside stage 07 (or 05 in fp32)
 * stage09_split_kv_decoding --splits 1                        # one block per KV head: no split
 * stage09_split_kv_decoding --variant no_pdl                  # one step of LOG.md undone
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
#include "common/random.h"
#include "common/reference.h"
#include "common/report.h"
#include "common/timer.h"
#include "common/verify.h"
#include "stages/05_flash2/flash2_attention.h"
#include "stages/07_memory_pipeline/pipelined_attention.h"
#include "stages/09_split_kv_decoding/split_kv_decoding.h"
#include "stages/09_split_kv_decoding/tuning.h"

namespace {

// The shared demo flags (common/cli.h) and the decoding problem's own.
struct Options : fa::DemoOptions {
  int64_t kv_heads = 0;          // --kv-heads; 0: Hkv = Hq
  std::vector<int64_t> kv_lens;  // --kv-lens; empty: every sequence is --seq-kv long
  int64_t splits = 0;            // --splits; 0: chosen from the shape and the GPU
  bool bandwidth = false;        // --bandwidth
};

std::string fixed(double x, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, x);
  return buf;
}

// The same inputs as an ordinary attention problem, where one exists: every query head its
// own KV head, every sequence as long as the cache, and no mask (or one new query, which
// sees every key under both alignments).
bool as_attention_problem(const fa::DecodeProblem& p, fa::AttentionProblem* out, std::string* why) {
  if (p.kv_heads != p.q_heads) {
    *why = "grouped-query attention (Hkv < Hq) has no equivalent in the earlier stages";
  } else if (p.longest() != p.max_seq_kv || p.total_kv() != p.batch * p.max_seq_kv) {
    *why = "the earlier stages have one length for every sequence";
  } else if (p.causal && p.seq_q > 1) {
    *why = "the earlier stages align the causal mask top-left";
  } else {
    *out = fa::make_problem(p.batch, p.q_heads, p.seq_q, p.max_seq_kv, p.dim, p.scale, false, p.dtype);
    return true;
  }
  return false;
}

// Device-to-device copy of `bytes`: what this GPU's memory moves in a plain copy, counted
// as read + written bytes over the time (median of `repeats`).
double copy_tbps(std::size_t bytes, int repeats) {
  fa::DeviceBuffer<unsigned char> a(bytes), b(bytes);
  a.fill_bytes(0);
  const fa::Timing t = fa::time_device(
      [&] { FA_CUDA_CHECK(cudaMemcpy(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice)); }, 2, repeats);
  return 2.0 * static_cast<double>(bytes) / (t.median_ms() * 1e-3) / 1e12;
}

int run(int argc, char** argv) {
  const bool cpu = fa::is_cpu_backend();
  Options o;
  static_cast<fa::DemoOptions&>(o) = fa::default_demo_options(cpu);
  if (cpu) {  // every CUDA thread is a fiber on one core: a small step, still split four ways
    o.batch = 2, o.heads = 8, o.kv_heads = 2, o.seq_q = 1, o.seq_kv = 1000, o.dim = 64, o.splits = 4;
  } else {  // one sequence and a cache of 32768 keys, as the benchmark's first shape
    o.batch = 1, o.heads = 32, o.seq_q = 1, o.seq_kv = 32768, o.dim = 128;
  }
  o.dtype = "fp16";
  fa::ArgParser a(argv[0],
                  "Stage 09_split_kv_decoding: one decode step, the KV cache split across blocks and the parts "
                  "merged with stage 02's rule.\nRuns it on random inputs, checks it against a float64 CPU "
                  "reference and reports its median time and the cache bytes read per second.");
  fa::add_demo_options(a, o, {"load", "save"});
  a.reword("batch", "sequences B");
  a.reword("heads", "query heads Hq");
  a.reword("seq-q", "new queries per sequence Nq");
  a.reword("seq-kv", "cache capacity Nmax: rows per KV head (and each length, unless --kv-lens)");
  a.reword("causal", "causal mask, bottom-right: query i sees keys j <= L - Nq + i");
  a.reword("dtype", "element type of Q, K, V, O: fp16, bf16 or fp32");
  a.reword("check-rows", "most query rows to check (spread over all sequences and heads)");
  a.reword("compare", "also run stage 07 (fp16/bf16) or 05 (fp32) on the same inputs");
  a.reword("dry-run", "check the shape and say what it needs, run nothing");
  a.add_int("kv-heads", &o.kv_heads, "key/value heads Hkv, dividing Hq (0: Hkv = Hq)", 0);
  a.add_int_list("kv-lens", &o.kv_lens, "one cache length per sequence, each in [1, --seq-kv]");
  a.add_int("splits", &o.splits, "splits of the longest cache; the others get as many as its chunk size gives (0: chosen from the shape and the GPU)", 0);
  a.add_switch("bandwidth", &o.bandwidth, "also time a device-to-device copy of the cache's bytes");
  const std::vector<fa::Variant<fa::decode::Decoder>> variants = fa::decode::variants();
  a.add_string("variant", &o.variant, fa::variant_help(variants), "NAME");
  if (!a.parse(argc, argv)) return fa::kExitPassed;
  const std::string name = o.variant.empty() ? "09_split_kv_decoding" : "09_split_kv_decoding:" + o.variant;
  const fa::decode::Decoder decoder = o.variant.empty() ? fa::decode::Decoder{fa::decode::make_plan, fa::decode::attention}
                                                        : fa::find_variant(variants, o.variant, "09_split_kv_decoding").run;

  fa::DType dtype;
  if (!fa::parse_dtype(o.dtype, &dtype)) {
    throw fa::UsageError("--dtype: unknown type '" + o.dtype + "' (the types: fp16, bf16, fp32)");
  }
  if (!a.given("seq-kv") && !o.kv_lens.empty()) {  // the capacity defaults to the longest sequence
    o.seq_kv = *std::max_element(o.kv_lens.begin(), o.kv_lens.end());
  }
  const fa::DecodeProblem p = fa::make_decode_problem(o.batch, o.heads, o.kv_heads ? o.kv_heads : o.heads, o.seq_q,
                                                      o.seq_kv, o.kv_lens, o.dim, o.scale, o.causal, dtype);
  const fa::DeviceInfo device = fa::require_device();
  const fa::decode::Plan plan = decoder.make_plan(p, device.sm_count, o.splits);
  const std::size_t workspace = fa::decode::workspace_bytes(p, plan);
  const std::size_t lse_bytes = static_cast<std::size_t>(p.rows()) * sizeof(float);
  fa::require_fits(device, p.device_bytes() + workspace + lse_bytes,
                   "Q, K, V, O " + fa::format_bytes(static_cast<double>(p.device_bytes())) + " + workspace " +
                       fa::format_bytes(static_cast<double>(workspace + lse_bytes)));
  if (o.dry_run) {
    std::cout << "dry run: " << fa::describe(p) << " fits ("
              << fa::format_bytes(static_cast<double>(p.device_bytes() + workspace + lse_bytes))
              << " on the device); plan: " << fa::decode::describe(plan, p) << "; nothing was run\n";
    return fa::kExitPassed;
  }

  // Inputs, poisoned outputs, one checked run.
  const fa::AttentionInputs in = fa::random_decode_inputs(p, o.seed, static_cast<float>(o.magnitude));
  const fa::DeviceInputs inputs = fa::upload_inputs(in.q, in.k, in.v, dtype);
  std::vector<int> lens32(p.kv_lens.begin(), p.kv_lens.end());
  const fa::DeviceBuffer<int> lens(lens32);
  fa::DeviceBuffer<unsigned char> out(static_cast<std::size_t>(p.q_elems()) * fa::dtype_bytes(dtype)), ws(workspace);
  fa::DeviceBuffer<float> lse(static_cast<std::size_t>(p.rows()));
  out.fill_bytes(fa::kPoisonByte);
  lse.fill_bytes(fa::kPoisonByte);
  const auto step = [&] {
    decoder.attention(p, plan, inputs.q.data(), inputs.k.data(), inputs.v.data(), lens.data(), out.data(), lse.data(),
                      ws.data());
  };
  step();
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  fa::AttentionCheck check;
  if (o.check) {
    const std::vector<float> got = fa::download_as_float(out.data(), static_cast<std::size_t>(p.q_elems()), dtype);
    const std::vector<float> got_lse = lse.download();
    check = fa::check_decode(p, in, got, fa::sample_indices(p.rows(), o.check_rows), &got_lse);
  }
  const double ms = fa::time_device(step, static_cast<int>(o.warmup), static_cast<int>(o.repeats)).median_ms();
  const double tbps = p.kv_bytes() / (ms * 1e-3) / 1e12;
  const double copy = o.bandwidth && !cpu && fa::fits(device, 2 * static_cast<std::size_t>(p.kv_bytes()))
                          ? copy_tbps(static_cast<std::size_t>(p.kv_bytes()), static_cast<int>(o.repeats))
                          : 0.0;
  const bool passed = !o.check || check.passed();
  const std::string verdict = !o.check ? "UNCHECKED" : (passed ? "PASSED" : "FAILED");

  // --compare: the earlier stage's grid of one block per (Q tile, head), on the same values.
  std::vector<fa::RunReport> compared;
  std::string skipped;
  if (o.compare) {
    fa::AttentionProblem ap;
    if (as_attention_problem(p, &ap, &skipped)) {
      const fa::StageDemo other = dtype == fa::DType::F32 ? fa::flash2::describe() : fa::pipeline::describe();
      fa::DemoOptions dopt;
      dopt.warmup = o.warmup, dopt.repeats = o.repeats, dopt.check = o.check, dopt.check_rows = o.check_rows;
      compared.push_back(fa::measure_stage(other, ap, in, inputs.tensors(), device, dopt));
    }
  }

  const std::string where = cpu ? "CPU backend" : "GPU: " + device.name;
  const std::string summary = name + ": " + verdict + "  " + fixed(ms, 3) + " ms" +
                              (cpu ? "" : "  " + fixed(tbps, 2) + " TB/s") + "  [" + fa::describe(p) + "]  [" +
                              where + "]";
  if (o.json) {
    fa::JsonWriter w(std::cout);
    w.begin_object().field("stage", name).field("backend", device.backend).field("device", device.name);
    w.field("batch", p.batch).field("q_heads", p.q_heads).field("kv_heads", p.kv_heads).field("seq_q", p.seq_q);
    w.field("max_seq_kv", p.max_seq_kv).field("total_kv", p.total_kv()).field("dim", p.dim).field("causal", p.causal);
    w.field("dtype", fa::dtype_name(dtype)).field("splits", plan.splits).field("chunk", plan.chunk);
    w.field("median_ms", ms).field("repeats", o.repeats).field("kv_bytes", p.kv_bytes());
    w.field("tbps", cpu ? std::nullopt : std::optional<double>(tbps));
    w.field("copy_tbps", copy > 0 ? std::optional<double>(copy) : std::nullopt);
    w.field("workspace_bytes", static_cast<uint64_t>(workspace));
    if (o.check) w.field("rows_checked", static_cast<uint64_t>(check.rows.size())).field("max_abs_err", check.o.max_abs_err);
    w.field("result", verdict).end_object();
    std::cout << "\n";
    for (const fa::RunReport& r : compared) fa::print_report_json(std::cout, r);
  } else if (o.brief) {
    std::cout << summary << "\n";
  } else {
    const auto line = [](const std::string& key, const std::string& value) {
      std::cout << "  " << key << std::string(key.size() < 12 ? 12 - key.size() : 1, ' ') << value << "\n";
    };
    std::cout << "stage " << name << ": decoding with a split KV cache, merged by stage 02's rule\n";
    line("device", cpu ? device.name + " (CPU backend: timings are not GPU performance)"
                       : device.name + " (" + std::to_string(device.sm_count) + " SMs)");
    line("shape", fa::describe(p));
    line("plan", fa::decode::describe(plan, p));
    line("cache read", fa::format_bytes(p.kv_bytes()) + " of K and V (each live row once); " +
                           fa::format_bytes(fa::decode::hbm_bytes_model(p, plan)) + " in all by the IO model");
    line("workspace", fa::format_bytes(static_cast<double>(workspace)) + " (each split's m, l and partial O)");
    line("time", "median " + fixed(ms, 3) + " ms over " + std::to_string(o.repeats) + " runs (" +
                     std::to_string(o.warmup) + " warm-up)" + (cpu ? " on the CPU backend" : ""));
    if (!cpu) {
      line("bandwidth", fixed(tbps, 3) + " TB/s of K and V read" +
                            (copy > 0 ? "; a device-to-device copy moves " + fixed(copy, 3) + " TB/s (read + write)"
                                      : ""));
    }
    if (o.check) {
      line("check", std::to_string(check.rows.size()) + " of " + std::to_string(p.rows()) +
                        " query rows against the float64 CPU reference");
      line("O", fa::describe(check.o, fa::decode_output_namer(p, check.rows)));
      line("lse", fa::describe(check.lse, fa::decode_row_namer(p, check.rows, "lse")));
    }
    for (const fa::RunReport& r : compared) {
      const bool same = r.problem.dtype == dtype;
      line("compare", r.stage + " on the same inputs (" + std::string(fa::dtype_name(r.problem.dtype)) +
                          (same ? "" : ", values unchanged") + "): " + fixed(r.median_ms, 3) + " ms" +
                          (cpu ? "" : ", " + fixed(p.kv_bytes() / (r.median_ms * 1e-3) / 1e12, 3) + " TB/s") +
                          ", check " + (!r.checked ? "skipped" : (r.check.passed() ? "PASSED" : "FAILED")) +
                          "; stage 09 is " + fixed(r.median_ms / ms, 1) + "x as fast");
    }
    if (o.compare && compared.empty()) line("compare", "skipped: " + skipped);
    std::cout << summary << "\n";
  }
  bool all = passed;
  for (const fa::RunReport& r : compared) all = all && r.passed();
  return all ? fa::kExitPassed : fa::kExitCheckFailed;
}

}  // namespace

/// Runs stage 09's demo; exits 0 when every check passed.
int main(int argc, char** argv) {
  return fa::run_guarded(argv[0], [&] { return run(argc, argv); });
}
