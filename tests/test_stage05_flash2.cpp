// Stage 05 against the float64 reference (the standard battery, log-sum-exp included),
// against stage 04 on the same inputs, and block-sparse against the reference of the masked
// problem.
#include <cmath>
#include <utility>
#include <vector>

#include "common/block_mask.h"
#include "common/cuda_check.h"
#include "common/device_buffer.h"
#include "common/random.h"
#include "common/reference.h"
#include "stages/04_flash1/flash1_attention.h"
#include "stages/05_flash2/flash2_attention.h"
#include "tests/catch.h"
#include "tests/stage_check.h"

TEST_CASE("stage 05 matches the reference, log-sum-exp included", "[stage05]") {
  const fa::test::StageFn run = [](const fa::AttentionProblem& p, const fa::DeviceTensors& t) {
    const auto f = t.f32();
    fa::flash2::attention(p, f.q, f.k, f.v, f.o, f.lse);
  };
  fa::test::check_attention_stage(run, /*with_lse=*/true, /*causal=*/true);
}

TEST_CASE("stage 05 equals stage 04 on the same inputs", "[stage05]") {
  for (bool causal : {false, true}) {
    const fa::AttentionProblem p = fa::make_problem(2, 2, 200, 150, 64, 0.0, causal);
    const fa::AttentionInputs in = fa::random_inputs(p, 31, 2.0f);
    fa::DeviceBuffer<float> q(in.q), k(in.k), v(in.v), o4(static_cast<size_t>(p.q_elems())),
        o5(static_cast<size_t>(p.q_elems())), m(static_cast<size_t>(p.rows())), l(static_cast<size_t>(p.rows()));
    o5.fill_bytes(fa::kPoisonByte);
    fa::flash1::attention(p, q.data(), k.data(), v.data(), o4.data(), m.data(), l.data());
    fa::flash2::attention(p, q.data(), k.data(), v.data(), o5.data());
    FA_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> a = o4.download(), b = o5.download();
    // Stage 04 serves as the reference here, at fp32 tolerance with a floor: the two
    // differ only in the order of their rounding.
    const std::vector<double> want(a.begin(), a.end());
    const fa::Comparison c = fa::compare(b.data(), want.data(), p.q_elems(), fa::fp32_tolerance(1.0, 1e-7));
    INFO("causal " << causal << ": " << fa::describe(c, fa::output_namer(p, fa::all_rows(p))));
    REQUIRE(c.passed());
  }
}

TEST_CASE("stage 05's m and 1/l of each row (RowStats) agree with the reference and its own lse", "[stage05]") {
  // m·ln 2 is the row's largest scaled score and m·ln 2 − ln(1/l) its log-sum-exp, to fp32's
  // rounding of the scores; the pair and the lse come from the same m and l. A row that a block
  // mask leaves without a key gets {0, 0}. Stats and lse poisoned first.
  uint64_t seed = 500;
  for (int64_t d : fa::supported_head_dims()) {
    for (auto [nq, nkv] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {1, 257}, {70, 7}, {130, 100}}) {
      for (bool causal : {false, true}) {
        for (bool masked : {false, true}) {
          if (masked && nq < 65) continue;  // the mask drops Q tile 0's blocks: a later tile must remain
          const fa::AttentionProblem p = fa::make_problem(2, 2, nq, nkv, d, 0.0, causal);
          const fa::AttentionInputs in = fa::random_inputs(p, ++seed, 10.0f);
          const auto rows = static_cast<size_t>(p.rows());
          fa::DeviceBuffer<float> q(in.q), k(in.k), v(in.v), o(static_cast<size_t>(p.q_elems())), lse(rows);
          fa::DeviceBuffer<fa::flash2::RowStats> stats(rows);
          lse.fill_bytes(fa::kPoisonByte);
          stats.fill_bytes(fa::kPoisonByte);
          fa::Mask mask;
          mask.blocks = fa::full_block_mask(p, fa::flash2::Br, fa::flash2::Bc);
          for (int64_t j = 0; j < mask.blocks->kv_blocks; ++j) mask.blocks->keep[static_cast<size_t>(j)] = 0;
          fa::DeviceBuffer<uint8_t> flags(mask.blocks->keep);
          fa::flash2::attention(p, q.data(), k.data(), v.data(), o.data(), lse.data(), masked ? flags.data() : nullptr,
                                stats.data());
          FA_CUDA_CHECK(cudaDeviceSynchronize());
          const std::vector<fa::flash2::RowStats> got = stats.download();
          const std::vector<float> got_lse = lse.download();
          const fa::AttentionRows<double> want = fa::reference_attention(p, in.q.data(), in.k.data(), in.v.data(),
                                                                         fa::all_rows(p), masked ? &mask : nullptr);
          INFO(fa::describe(p) << (masked ? ", Q tile 0's blocks dropped" : ""));
          for (size_t r = 0; r < rows; ++r) {
            INFO("row " << r << ": m " << got[r].m << ", 1/l " << got[r].inv_l << ", lse " << got_lse[r]
                        << "; the reference's max " << want.m[r] << ", lse " << want.lse[r]);
            if (std::isinf(want.lse[r])) {  // no key: the pair is {0, 0}, lse −inf
              REQUIRE((got[r].m == 0.0f && got[r].inv_l == 0.0f && std::isinf(got_lse[r]) && got_lse[r] < 0));
              continue;
            }
            const double m = got[r].m * std::log(2.0), lse_from = m - std::log(static_cast<double>(got[r].inv_l));
            const double scale = std::fabs(want.lse[r]) + 1.0;
            REQUIRE(std::fabs(m - want.m[r]) <= 1e-5 * scale);
            REQUIRE(got[r].inv_l > 0.0f);
            REQUIRE(got[r].inv_l <= 1.0f);  // l >= 1: the largest score's own term is 2^0
            REQUIRE(std::fabs(lse_from - want.lse[r]) <= 1e-5 * scale);
            REQUIRE(std::fabs(lse_from - got_lse[r]) <= 2e-6 * scale);
          }
        }
      }
    }
  }
}

TEST_CASE("stage 05 block-sparse matches the reference of the masked problem", "[stage05][block_sparse]") {
  const fa::test::MaskedStageFn run = [](const fa::AttentionProblem& p, const fa::DeviceTensors& t,
                                         const uint8_t* mask) {
    const auto f = t.f32();
    fa::flash2::attention(p, f.q, f.k, f.v, f.o, f.lse, mask);
  };
  fa::test::check_block_sparse_stage(run, fa::flash2::Br, fa::flash2::Bc, fa::DType::F32, fa::supported_head_dims());
}
