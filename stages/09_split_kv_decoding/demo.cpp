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

#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "common/cli.h"
#include "common/cuda_check.h"
#include "common/demo.h"
#include "common/device.h"
#include "common/device_buffer.h"
#include "common/errors.h"
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

// One decode step: the new queries of every sequence against its KV cache.
class DecodeDemo final : public fa::Demo {
 public:
  DecodeDemo() {
    if (fa::is_cpu_backend()) kv_heads_ = 2, splits_ = 4;  // grouped-query, split four ways, on the CPU too
  }
  std::string id() const override { return "09_split_kv_decoding"; }
  std::string about() const override {
    return "one decode step, the KV cache split across blocks and the parts merged with stage 02's rule.\n"
           "Runs it on random inputs, checks it against a float64 CPU reference and reports its median time and "
           "the cache bytes read per second.";
  }
  void set_defaults(fa::DemoOptions& o) const override {
    if (fa::is_cpu_backend()) {  // every CUDA thread is a fiber on one core: a small step, still split four ways
      o.batch = 2, o.heads = 8, o.seq_q = 1, o.seq_kv = 1000, o.dim = 64;
    } else {  // one sequence and a cache of 32768 keys, as the benchmark's first shape
      o.batch = 1, o.heads = 32, o.seq_q = 1, o.seq_kv = 32768, o.dim = 128;
    }
    o.dtype = "fp16";
  }
  std::vector<std::string> left_out_flags() const override { return {"load", "save"}; }
  void add_flags(fa::ArgParser& a) override {
    a.reword("batch", "sequences B");
    a.reword("heads", "query heads Hq");
    a.reword("seq-q", "new queries per sequence Nq");
    a.reword("seq-kv", "cache capacity Nmax: rows per KV head (and each length, unless --kv-lens)");
    a.reword("causal", "causal mask, bottom-right: query i sees keys j <= L - Nq + i");
    a.reword("dtype", "element type of Q, K, V, O: fp16, bf16 or fp32");
    a.reword("check-rows", "most query rows to check (spread over all sequences and heads)");
    a.reword("compare", "also run stage 07 (fp16/bf16) or 05 (fp32) on the same inputs");
    a.reword("dry-run", "check the shape and say what it needs, run nothing");
    a.add_int("kv-heads", &kv_heads_, "key/value heads Hkv, dividing Hq (0: Hkv = Hq)", 0);
    a.add_int_list("kv-lens", &kv_lens_, "one cache length per sequence, each in [1, --seq-kv]");
    a.add_int("splits", &splits_,
              "splits of the longest cache; the others get as many as its chunk size gives (0: chosen from the "
              "shape and the GPU)",
              0);
    a.add_switch("bandwidth", &bandwidth_, "also time a device-to-device copy of the cache's bytes");
  }
  std::string variant_help() const override { return fa::variant_help(variants_); }

  std::optional<int> setup(const fa::DemoOptions& o, const fa::ArgParser& a) override {
    opt_ = o;
    decoder_ = fa::pick_variant(variants_, o.variant, id(), decoder_, &variant_);
    fa::DType dtype;
    if (!fa::parse_dtype(o.dtype, &dtype)) {
      throw fa::UsageError("--dtype: unknown type '" + o.dtype + "' (the types: fp16, bf16, fp32)");
    }
    int64_t capacity = o.seq_kv;
    if (!a.given("seq-kv") && !kv_lens_.empty()) {  // the capacity defaults to the longest sequence
      capacity = *std::max_element(kv_lens_.begin(), kv_lens_.end());
    }
    p_ = fa::make_decode_problem(o.batch, o.heads, kv_heads_ ? kv_heads_ : o.heads, o.seq_q, capacity, kv_lens_, o.dim,
                                 o.scale, o.causal, dtype);
    return std::nullopt;
  }

  fa::DemoFootprint footprint(const fa::DeviceInfo& device) override {
    plan_ = decoder_.make_plan(p_, device.sm_count, splits_);
    const std::size_t workspace = fa::decode::workspace_bytes(p_, plan_);
    const std::size_t lse_bytes = static_cast<std::size_t>(p_.rows()) * sizeof(float);
    fa::DemoFootprint f;
    f.shape = fa::describe(p_);
    f.device_bytes = p_.device_bytes() + workspace + lse_bytes;
    f.what = "Q, K, V, O " + fa::format_bytes(static_cast<double>(p_.device_bytes())) + " + workspace " +
             fa::format_bytes(static_cast<double>(workspace + lse_bytes));
    f.plan = "plan: " + fa::decode::describe(plan_, p_);
    return f;
  }

  fa::RunReport run(const fa::DeviceInfo& device) override {
    // Inputs, poisoned outputs, one checked run.
    const fa::AttentionInputs in = fa::random_decode_inputs(p_, opt_.seed, static_cast<float>(opt_.magnitude));
    const fa::DeviceInputs inputs = fa::upload_inputs(in.q, in.k, in.v, p_.dtype);
    const std::vector<int> lens32(p_.kv_lens.begin(), p_.kv_lens.end());
    const fa::DeviceBuffer<int> lens(lens32);
    const std::size_t workspace = fa::decode::workspace_bytes(p_, plan_);
    fa::DeviceBuffer<unsigned char> out(static_cast<std::size_t>(p_.q_elems()) * fa::dtype_bytes(p_.dtype)),
        ws(workspace);
    fa::DeviceBuffer<float> lse(static_cast<std::size_t>(p_.rows()));
    out.fill_bytes(fa::kPoisonByte);
    lse.fill_bytes(fa::kPoisonByte);
    const auto step = [&] {
      decoder_.attention(p_, plan_, inputs.q.data(), inputs.k.data(), inputs.v.data(), lens.data(), out.data(),
                         lse.data(), ws.data());
    };
    step();
    FA_CUDA_CHECK(cudaDeviceSynchronize());

    fa::RunReport r;
    r.stage = opt_.variant.empty() ? id() : id() + ":" + opt_.variant;
    r.title = "decoding with a split KV cache, merged by stage 02's rule";
    r.device = device;
    r.shape = fa::describe(p_);
    r.dtype = p_.dtype;
    r.fields = fa::problem_fields(p_);
    r.fields.push_back({"splits", plan_.splits});
    r.fields.push_back({"chunk", plan_.chunk});
    r.fields.push_back({"kv_bytes", static_cast<int64_t>(p_.kv_bytes())});
    r.workspace_bytes = workspace;
    r.hbm_model_bytes = fa::decode::hbm_bytes_model(p_, plan_);
    if (!variant_.empty()) r.notes.push_back({"variant", variant_});
    r.notes.push_back({"plan", fa::decode::describe(plan_, p_)});
    r.notes.push_back({"cache read", fa::format_bytes(p_.kv_bytes()) + " of K and V (each live row once); the "
                                     "workspace holds each split's m, l and partial O"});
    if (opt_.check) {
      const std::vector<float> got =
          fa::download_as_float(out.data(), static_cast<std::size_t>(p_.q_elems()), p_.dtype);
      const std::vector<float> got_lse = lse.download();
      const fa::AttentionCheck check =
          fa::check_decode(p_, in, got, fa::sample_indices(p_.rows(), opt_.check_rows), &got_lse);
      r.checked = true;
      r.checked_what = std::to_string(check.rows.size()) + " of " + std::to_string(p_.rows()) + " query rows";
      r.checked_count = {"rows_checked", static_cast<int64_t>(check.rows.size())};
      r.checks.push_back({"O", check.o, fa::decode_output_namer(p_, check.rows)});
      r.checks.push_back({"lse", check.lse, fa::decode_row_namer(p_, check.rows, "lse")});
    }

    const int repeats = static_cast<int>(opt_.repeats);
    r.median_ms = fa::time_device(step, static_cast<int>(opt_.warmup), repeats).median_ms();
    r.warmup = opt_.warmup;
    r.repeats = opt_.repeats;
    r.metrics.push_back(cache_rate(device, r.median_ms));
    const auto kv = static_cast<std::size_t>(p_.kv_bytes());
    if (bandwidth_ && device.backend != "cpu" && fa::fits(device, 2 * kv)) {
      r.metrics.push_back(fa::rate_metric(device, "copy_tbps", copy_tbps(kv, repeats), "TB/s", "copy",
                                          "read + written by a device-to-device copy of the cache's bytes", false, 3));
    }

    // --compare: the earlier stage's grid of one block per (Q tile, head), on the same values.
    if (opt_.compare) {
      fa::AttentionProblem ap;
      std::string why;
      const fa::StageDemo other = p_.dtype == fa::DType::F32 ? fa::flash2::describe() : fa::pipeline::describe();
      if (as_attention_problem(p_, &ap, &why)) {
        fa::RunReport c = fa::measure_stage(other, ap, in, inputs.tensors(), device, opt_);
        c.metrics.insert(c.metrics.begin(), cache_rate(device, c.median_ms));
        r.compared.push_back(std::move(c));
      } else {
        r.skipped.push_back(other.id + ": " + why);
      }
    }
    return r;
  }

 private:
  // K and V of the cache read over `ms`: the rate this stage is measured by.
  fa::Metric cache_rate(const fa::DeviceInfo& device, double ms) const {
    return fa::rate_metric(device, "tbps", p_.kv_bytes() / (ms * 1e-3) / 1e12, "TB/s", "bandwidth",
                           "of K and V read", true, 3);
  }

  const std::vector<fa::Variant<fa::decode::Decoder>> variants_ = fa::decode::variants();
  int64_t kv_heads_ = 0;          // --kv-heads; 0: Hkv = Hq
  std::vector<int64_t> kv_lens_;  // --kv-lens; empty: every sequence is --seq-kv long
  int64_t splits_ = 0;            // --splits; 0: chosen from the shape and the GPU
  bool bandwidth_ = false;        // --bandwidth
  fa::decode::Decoder decoder_{fa::decode::make_plan, fa::decode::attention};  // or a --variant's
  std::string variant_;           // the --variant's name and summary, if one was given
  fa::DemoOptions opt_;
  fa::DecodeProblem p_;
  fa::decode::Plan plan_;
};

}  // namespace

/// Runs stage 09's demo through the shared driver; exits 0 when every check passed.
int main(int argc, char** argv) {
  DecodeDemo demo;
  return fa::run_demo(argc, argv, demo);
}
