// Stage 05 against the float64 reference (the standard battery, log-sum-exp included),
// against stage 04 on the same inputs, and block-sparse against the reference of the masked
// problem.
#include <vector>

#include "common/cuda_check.h"
#include "common/device_buffer.h"
#include "common/random.h"
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

TEST_CASE("stage 05 block-sparse matches the reference of the masked problem", "[stage05][block_sparse]") {
  const fa::test::MaskedStageFn run = [](const fa::AttentionProblem& p, const fa::DeviceTensors& t,
                                         const uint8_t* mask) {
    const auto f = t.f32();
    fa::flash2::attention(p, f.q, f.k, f.v, f.o, f.lse, mask);
  };
  fa::test::check_block_sparse_stage(run, fa::flash2::Br, fa::flash2::Bc, fa::DType::F32, fa::supported_head_dims());
}
