// Stage 09 against the float64 reference: ragged cache lengths (1 included), split counts
// that do not divide them, grouped-query attention with groups of 1, 4 and 8, several new
// queries under the bottom-right causal mask, large logits, every head dimension, in fp16,
// bf16 and fp32. Outputs are poisoned before each run and the cache's spare rows hold NaN,
// so an element never written, or a read past a sequence's end, fails. A copy of the kernel
// whose merge drops a partial split (built by stages/09_split_kv_decoding/CMakeLists.txt)
// must fail the same checks.
#include <cuda_runtime.h>

#include <cmath>
#include <functional>
#include <vector>

#include "common/cuda_check.h"
#include "common/decode_problem.h"
#include "common/demo.h"
#include "common/device.h"
#include "common/device_buffer.h"
#include "common/random.h"
#include "common/reference.h"
#include "common/verify.h"
#include "stages/09_split_kv_decoding/split_kv_decoding.h"
#include "stages/09_split_kv_decoding/tuning.h"
#include "tests/catch.h"
#include "tests/stage_check.h"

namespace fa::decode::planted {
// The planted copy: the merge kernel forgets each sequence's last split when it is partial.
void attention(const DecodeProblem& p, const Plan& plan, const void* Q, const void* K, const void* V,
               const int* kv_lens, void* O, float* lse, void* workspace);
}  // namespace fa::decode::planted

namespace fa::decode::one_slot {
// The second planted copy: every split of a row writes its partial result to the same slot.
void attention(const DecodeProblem& p, const Plan& plan, const void* Q, const void* K, const void* V,
               const int* kv_lens, void* O, float* lse, void* workspace);
}  // namespace fa::decode::one_slot

namespace {

using fa::decode::Decoder;
constexpr Decoder finished{fa::decode::make_plan, fa::decode::attention};

// One decode step on fresh inputs (seeded), every row and its log-sum-exp checked.
// A non-zero `logit`: every logit moved to about that value (fa::shift_logits). With
// `plan_for`, the plan is made for that problem's (longer) lengths instead of p's.
fa::AttentionCheck run_and_check(const fa::DecodeProblem& p, int64_t splits, uint64_t seed, float magnitude = 1.0f,
                                 Decoder decoder = finished, double logit = 0.0,
                                 const fa::DecodeProblem* plan_for = nullptr) {
  const fa::DecodeProblem& planned = plan_for ? *plan_for : p;
  const fa::decode::Plan plan = decoder.make_plan(planned, fa::require_device().sm_count, splits);
  if (splits > 0) REQUIRE(plan.splits == std::min(splits, planned.longest()));
  fa::AttentionInputs in = fa::random_decode_inputs(p, seed, magnitude);
  if (logit != 0.0) fa::shift_logits(in, p.dim, p.scale, p.dtype, logit);
  const fa::DeviceInputs inputs = fa::upload_inputs(in.q, in.k, in.v, p.dtype);
  const fa::DeviceBuffer<int> lens(std::vector<int>(p.kv_lens.begin(), p.kv_lens.end()));
  fa::DeviceBuffer<unsigned char> o(static_cast<size_t>(p.q_elems()) * fa::dtype_bytes(p.dtype));
  fa::DeviceBuffer<unsigned char> ws(fa::decode::workspace_bytes(p, plan));
  fa::DeviceBuffer<float> lse(static_cast<size_t>(p.rows()));
  o.fill_bytes(fa::kPoisonByte);
  lse.fill_bytes(fa::kPoisonByte);
  ws.fill_bytes(fa::kPoisonByte);
  decoder.attention(p, plan, inputs.q.data(), inputs.k.data(), inputs.v.data(), lens.data(), o.data(), lse.data(), ws.data());
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> got = fa::download_as_float(o.data(), static_cast<size_t>(p.q_elems()), p.dtype);
  const std::vector<float> got_lse = lse.download();
  std::vector<int64_t> rows(static_cast<size_t>(p.rows()));
  for (int64_t r = 0; r < p.rows(); ++r) rows[static_cast<size_t>(r)] = r;
  return fa::check_decode(p, in, got, rows, &got_lse);
}

void require_passed(const fa::DecodeProblem& p, int64_t splits, const fa::AttentionCheck& c) {
  INFO(fa::describe(p) << ", splits " << splits);
  INFO(fa::describe(c.o, fa::decode_output_namer(p, c.rows)));
  INFO(fa::describe(c.lse, fa::decode_row_namer(p, c.rows, "lse")));
  REQUIRE(c.passed());
}

const std::vector<fa::DType>& all_dtypes() {
  static const std::vector<fa::DType> types = {fa::DType::F16, fa::DType::BF16, fa::DType::F32};
  return types;
}

}  // namespace

TEST_CASE("stage 09: ragged cache lengths, uneven splits, every head dim and precision", "[stage09]") {
  // Lengths 1 and 1000 in one batch; split counts 1 (no merge), 3 and 7 (dividing none of
  // the lengths), and the automatic choice.
  // One query head per KV head (one row: CUDA cores) and three (three rows: tensor cores
  // in fp16 and bf16, with 13 zero rows of padding).
  uint64_t seed = 900;
  for (fa::DType dtype : all_dtypes()) {
    for (int64_t d : fa::supported_head_dims()) {
      if (!fa::test::dtype_case_runs(dtype, d)) continue;  // under ASan, one 16-bit type a head dim
      for (int64_t hq : {2, 6}) {
        for (int64_t splits : {0, 1, 3, 7}) {
          const fa::DecodeProblem p =
              fa::make_decode_problem(4, hq, 2, 1, 1000, {1, 37, 1000, 300}, d, 0.0, false, dtype);
          require_passed(p, splits, run_and_check(p, splits, ++seed));
        }
      }
    }
  }
}

// More sequences than a warp has lanes: a block finds its sequence and split by scanning
// the lengths 32 at a time, so a batch of 70 takes three rounds of that scan. Lengths from
// 1 to 300, with the automatic chunk and with a forced one.
TEST_CASE("stage 09: a large ragged batch, each sequence split by its own length", "[stage09][ragged]") {
  std::vector<int64_t> lens;
  for (int64_t b = 0; b < 70; ++b) lens.push_back(1 + (b * 137) % 300);
  for (fa::DType dtype : all_dtypes()) {
    for (int64_t kv_heads : {4, 1}) {  // groups of 1 (CUDA cores) and of 4 (tensor cores; in fp32 CUDA cores)
      const fa::DecodeProblem p = fa::make_decode_problem(70, 4, kv_heads, 1, 300, lens, 64, 0.0, false, dtype);
      for (int64_t splits : {0, 5}) require_passed(p, splits, run_and_check(p, splits, 91 + splits));
    }
  }
}

TEST_CASE("stage 09: grouped-query attention, groups of 1, 4 and 8, several new queries", "[stage09][gqa]") {
  uint64_t seed = 1900;
  for (fa::DType dtype : all_dtypes()) {
    for (auto [hq, hkv] : {std::pair<int64_t, int64_t>{2, 2}, {8, 2}, {8, 1}}) {
      for (int64_t nq : {1, 3}) {  // G·Nq rows of 1 to 24: one or two row groups of 16 (4 in fp32)
        for (int64_t d : {64, 128}) {
          const fa::DecodeProblem p = fa::make_decode_problem(2, hq, hkv, nq, 517, {517, 130}, d, 0.0, false, dtype);
          require_passed(p, 5, run_and_check(p, 5, ++seed));
          require_passed(p, 0, run_and_check(p, 0, ++seed));
        }
      }
    }
  }
}

TEST_CASE("stage 09: bottom-right causal mask for several new queries", "[stage09][causal]") {
  // Each sequence's last Nq positions are the new queries: a length equal to Nq (the first
  // query sees one key), a split boundary inside the masked triangle, and a long one.
  uint64_t seed = 2900;
  for (fa::DType dtype : all_dtypes()) {
    for (int64_t nq : {2, 16}) {
      for (int64_t splits : {1, 4, 0}) {
        const fa::DecodeProblem p =
            fa::make_decode_problem(3, 4, 2, nq, 700, {nq, nq + 5, 700}, 32, 0.0, true, dtype);
        require_passed(p, splits, run_and_check(p, splits, ++seed));
      }
    }
  }
}

TEST_CASE("stage 09: large logits", "[stage09][large]") {
  // Inputs in [-30, 30]: logits in the thousands, whose maxima differ wildly between the
  // warps and splits that the merges combine.
  for (fa::DType dtype : all_dtypes()) {
    for (int64_t d : {64, 128}) {
      const fa::DecodeProblem p = fa::make_decode_problem(2, 4, 1, 2, 900, {900, 333}, d, 0.0, true, dtype);
      const fa::AttentionCheck c = run_and_check(p, 6, 77, 30.0f);
      require_passed(p, 6, c);
    }
  }
}

TEST_CASE("stage 09: rows whose logits are all far below zero, ragged cache lengths", "[stage09][large]") {
  // Every logit near −300: each split's and each warp's maximum must be a real score of its
  // keys, or exp(s − m) underflows for all of them; lengths that end inside a tile.
  for (fa::DType dtype : all_dtypes()) {
    for (int64_t splits : {int64_t{1}, int64_t{3}}) {
      const fa::DecodeProblem p = fa::make_decode_problem(3, 2, 1, 2, 700, {700, 37, 1}, 64, 0.0, false, dtype);
      require_passed(p, splits, run_and_check(p, splits, 78, 1.0f, finished, -300.0));
    }
  }
}

TEST_CASE("stage 09: a plan made for longer caches decodes shorter ones", "[stage09][plan]") {
  // A plan made once for the longest lengths a step may see, then run on shorter caches:
  // the blocks of chunks past the last sequence's end find no work and write nothing.
  const fa::DecodeProblem longer = fa::make_decode_problem(2, 2, 2, 1, 700, {700, 300}, 64);
  const fa::DecodeProblem shorter = fa::make_decode_problem(2, 2, 2, 1, 700, {650, 37}, 64);
  for (int64_t splits : {int64_t{1}, int64_t{4}}) {
    require_passed(shorter, splits, run_and_check(shorter, splits, 79, 1.0f, finished, 0.0, &longer));
  }
}

TEST_CASE("stage 09's plan: splits from the shape, none left empty", "[stage09][plan]") {
  const fa::DecodeProblem mha = fa::make_decode_problem(1, 32, 32, 1, 32768, {}, 128);
  const fa::decode::Plan a = fa::decode::make_plan(mha, 132);
  CHECK(a.rows_per_block == 1);
  CHECK(a.row_groups == 1);
  // One wave: at most fa::decode::Tuned::blocks_per_sm blocks an SM (fewer where fewer fit), nearly full.
  CHECK(a.splits * 32 <= 132 * fa::decode::Tuned::blocks_per_sm);
  if (fa::is_cpu_backend()) CHECK((a.splits + 1) * 32 > 132 * fa::decode::Tuned::blocks_per_sm);  // a GPU may fit fewer
  CHECK(a.splits * a.chunk >= 32768);
  CHECK((a.splits - 1) * a.chunk < 32768);
  // Grouped queries go to the tensor cores in fp16 and bf16 (16 rows a block), to CUDA cores
  // in fp32 (4 rows a block).
  const fa::DecodeProblem gqa = fa::make_decode_problem(16, 32, 8, 1, 32768, {}, 128);
  const fa::decode::Plan g = fa::decode::make_plan(gqa, 132);
  CHECK(g.rows_per_block == fa::decode::MMA_ROWS);
  CHECK(fa::decode::uses_tensor_cores(g));
  CHECK(g.row_groups == 1);
  const fa::DecodeProblem gqa32 = fa::make_decode_problem(16, 32, 8, 1, 32768, {}, 128, 0.0, false, fa::DType::F32);
  CHECK(fa::decode::make_plan(gqa32, 132).rows_per_block == 4);
  const fa::DecodeProblem many = fa::make_decode_problem(1, 8, 1, 5, 1000, {}, 64);  // 40 rows
  CHECK(fa::decode::make_plan(many, 132).row_groups == 3);
  CHECK(!fa::decode::uses_tensor_cores(a));
  // Short caches keep at least MIN_CHUNK keys a split; a forced count is capped by the length.
  const fa::DecodeProblem short_cache = fa::make_decode_problem(1, 1, 1, 1, 300, {}, 64);
  CHECK(fa::decode::make_plan(short_cache, 132).splits == 1);
  CHECK(fa::decode::make_plan(short_cache, 132, 1000).splits == 300);
  CHECK(fa::decode::make_plan(short_cache, 132, 1000).chunk == 1);
  CHECK(fa::decode::workspace_bytes(short_cache, fa::decode::make_plan(short_cache, 132)) == 0);
  // A ragged batch: one chunk size for all sequences, so each gets splits in proportion to
  // its length, and the blocks of all of them fill one wave.
  const std::vector<int64_t> lens = {32768, 16384, 8192, 1000};
  const fa::DecodeProblem ragged = fa::make_decode_problem(4, 32, 8, 1, 32768, lens, 128);
  const fa::decode::Plan r = fa::decode::make_plan(ragged, 132);
  const auto chunks_of = [&](int64_t chunk) {
    int64_t n = 0;
    for (int64_t len : lens) n += (len + chunk - 1) / chunk;
    return n;
  };
  CHECK(r.chunks == chunks_of(r.chunk));
  CHECK(r.splits == (32768 + r.chunk - 1) / r.chunk);
  CHECK(r.blocks() * 8 <= 132 * fa::decode::Tuned::blocks_per_sm);
  if (fa::is_cpu_backend()) CHECK(chunks_of(r.chunk - 1) * 8 > 132 * fa::decode::Tuned::blocks_per_sm);  // the smallest chunk that fits
  CHECK(r.splits >= 16 * ((1000 + r.chunk - 1) / r.chunk));
}

TEST_CASE("a decoding problem refuses what it cannot run, with a clear message", "[stage09][input]") {
  using fa::test::HasSubstring;
  REQUIRE_THROWS_WITH(fa::make_decode_problem(1, 6, 4, 1, 100, {}, 64), HasSubstring("multiple of kv-heads"));
  REQUIRE_THROWS_WITH(fa::make_decode_problem(2, 4, 4, 1, 100, {100}, 64), HasSubstring("one per sequence"));
  REQUIRE_THROWS_WITH(fa::make_decode_problem(1, 4, 4, 1, 100, {101}, 64), HasSubstring("outside [1, 100]"));
  REQUIRE_THROWS_WITH(fa::make_decode_problem(1, 4, 4, 1, 100, {0}, 64), HasSubstring("outside [1, 100]"));
  REQUIRE_THROWS_WITH(fa::make_decode_problem(1, 4, 4, 8, 100, {5}, 64, 0.0, true), HasSubstring("at least Nq"));
  REQUIRE_THROWS_WITH(fa::make_decode_problem(1, 4, 4, 1, 100, {}, 48), HasSubstring("head dim 48"));
  REQUIRE_THROWS_WITH(fa::make_decode_problem(1, 4, 0, 1, 100, {}, 64), HasSubstring("kv-heads must be at least 1"));
  // 70000 sequences of one split each: more chunks than a grid's y dimension holds (65535).
  const fa::DecodeProblem many = fa::make_decode_problem(70000, 1, 1, 1, 1, {}, 64);
  REQUIRE_THROWS_WITH(fa::decode::make_plan(many, 132, 1), HasSubstring("the problem is too large for one grid"));
}

// Each variant of tuning.h changes one step of LOG.md; each must still decode: one query row
// (CUDA cores, or the tensor cores in mma_all) and grouped queries (the tensor cores, or CUDA
// cores in cuda_cores), a ragged batch with several splits and the planner's own choice,
// bottom-right causal with several new queries, d = 64 and 128.
TEST_CASE("every variant of stage 09 matches the reference", "[stage09][variants]") {
  const std::vector<fa::Variant<Decoder>> variants = fa::decode::variants();
  CHECK(variants.size() == std::tuple_size_v<fa::decode::Variants>);
  uint64_t seed = 60;
  for (const auto& v : variants) {
    if (v.name == "tuned") continue;  // the finished kernels: the tests above run them
    INFO("variant " << v.name << ": " << v.summary);
    for (int64_t d : {64, 128}) {
      const fa::DecodeProblem one = fa::make_decode_problem(2, 2, 2, 1, 700, {700, 45}, d, 0.0, false, fa::DType::F16);
      require_passed(one, 5, run_and_check(one, 5, ++seed, 1.0f, v.run));
      require_passed(one, 0, run_and_check(one, 0, ++seed, 1.0f, v.run));
      const fa::DecodeProblem gqa = fa::make_decode_problem(2, 8, 2, 3, 500, {500, 130}, d, 0.0, true, fa::DType::F16);
      require_passed(gqa, 4, run_and_check(gqa, 4, ++seed, 1.0f, v.run));
    }
  }
  const fa::DecodeProblem bf16 = fa::make_decode_problem(1, 1, 1, 1, 10, {}, 64, 0.0, false, fa::DType::BF16);
  REQUIRE_THROWS_WITH(fa::find_variant(variants, "no_pdl", "09").run.attention(bf16, {}, nullptr, nullptr, nullptr,
                                                                               nullptr, nullptr, nullptr, nullptr),
                      fa::test::HasSubstring("fp16 at d = 64 and 128 only"));
}

TEST_CASE("a merge that drops a sequence's partial last split is caught", "[stage09][planted]") {
  // 1000 keys in splits of 143 (7 splits): the last has 142 keys; 37 keys in one partial split.
  for (fa::DType dtype : all_dtypes()) {
    const fa::DecodeProblem p = fa::make_decode_problem(2, 2, 2, 1, 1000, {1000, 37}, 64, 0.0, false, dtype);
    const fa::AttentionCheck bad = run_and_check(p, 7, 5, 1.0f, {fa::decode::make_plan, fa::decode::planted::attention});
    INFO(fa::describe(bad.o, fa::decode_output_namer(p, bad.rows)));
    REQUIRE_FALSE(bad.passed());
    require_passed(p, 7, run_and_check(p, 7, 5));
  }
}

TEST_CASE("splits that write their partial results to one slot are caught", "[stage09][planted]") {
  // Two splits of each row write the same workspace slot. On the CPU backend, whose blocks
  // run one at a time, the race detector reports it (the last split's part wins, and the
  // merge adds it twice); on a GPU the results are wrong.
  for (fa::DType dtype : all_dtypes()) {
    const fa::DecodeProblem p = fa::make_decode_problem(1, 2, 2, 1, 300, {300}, 64, 0.0, false, dtype);
    const fa::decode::Decoder one_slot{fa::decode::make_plan, fa::decode::one_slot::attention};
    if (fa::test::race_detector_on()) {
      REQUIRE_THROWS_WITH(run_and_check(p, 2, 6, 1.0f, one_slot),
                          fa::test::HasSubstring("global-memory race between blocks (write after write)") &&
                              fa::test::HasSubstring("split_kv_decoding_one_slot.cu:"));
    } else {
      const fa::AttentionCheck bad = run_and_check(p, 2, 6, 1.0f, one_slot);
      REQUIRE_FALSE(bad.passed());
    }
    require_passed(p, 2, run_and_check(p, 2, 6));
  }
}
