// Stage 04 against the float64 reference: the standard battery (with shapes smaller
// than one 64-row tile and not multiples of it), and the final m and l of every row.
#include <cmath>
#include <vector>

#include "common/cuda_check.h"
#include "common/device_buffer.h"
#include "common/random.h"
#include "common/reference.h"
#include "stages/04_flash1/flash1_attention.h"
#include "tests/catch.h"
#include "tests/stage_check.h"

namespace {

// Runs stage 04 and hands its final m and l to the battery as log-sum-exp = m + log(l).
void run_flash1(const fa::AttentionProblem& p, const fa::DeviceTensors& t) {
  fa::DeviceBuffer<float> m(static_cast<size_t>(p.rows())), l(static_cast<size_t>(p.rows()));
  const auto f = t.f32();
  fa::flash1::attention(p, f.q, f.k, f.v, f.o, m.data(), l.data());
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> mh = m.download(), lh = l.download();
  std::vector<float> lse(mh.size());
  for (size_t r = 0; r < lse.size(); ++r) lse[r] = mh[r] + std::log(lh[r]);
  FA_CUDA_CHECK(cudaMemcpy(t.lse, lse.data(), lse.size() * sizeof(float), cudaMemcpyHostToDevice));
}

}  // namespace

TEST_CASE("stage 04 matches the reference", "[stage04]") {
  fa::test::check_attention_stage(run_flash1, /*with_lse=*/true, /*causal=*/true);
}

TEST_CASE("stage 04's final m and l are each row's max score and exp-sum", "[stage04]") {
  for (bool causal : {false, true}) {
    const fa::AttentionProblem p = fa::make_problem(2, 3, 130, 70, 32, 0.0, causal);  // 3 Q tiles, 2 K/V tiles
    const fa::AttentionInputs in = fa::random_inputs(p, 21, 3.0f);
    fa::DeviceBuffer<float> q(in.q), k(in.k), v(in.v), o(static_cast<size_t>(p.q_elems()));
    fa::DeviceBuffer<float> m(static_cast<size_t>(p.rows())), l(static_cast<size_t>(p.rows()));
    m.fill_bytes(fa::kPoisonByte);
    l.fill_bytes(fa::kPoisonByte);
    fa::flash1::attention(p, q.data(), k.data(), v.data(), o.data(), m.data(), l.data());
    FA_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> got_m = m.download(), got_l = l.download();
    const auto rows = fa::all_rows(p);
    const auto ref = fa::reference_attention(p, in.q.data(), in.k.data(), in.v.data(), rows);
    const auto base = fa::baseline_attention_fp32(p, in.q.data(), in.k.data(), in.v.data(), rows);
    std::vector<double> ref_l(rows.size());
    std::vector<float> base_l(rows.size());
    for (size_t r = 0; r < rows.size(); ++r) {
      ref_l[r] = std::exp(ref.lse[r] - ref.m[r]);
      base_l[r] = std::exp(base.lse[r] - base.m[r]);
    }
    const int64_t n = static_cast<int64_t>(rows.size());
    const fa::Comparison cm = fa::compare_fp32(got_m.data(), ref.m.data(), base.m.data(), n);
    const fa::Comparison cl = fa::compare_fp32(got_l.data(), ref_l.data(), base_l.data(), n);
    INFO("causal " << causal << "\nm: " << fa::describe(cm, fa::row_namer(p, rows, "m")) << "\nl: "
                   << fa::describe(cl, fa::row_namer(p, rows, "l")));
    REQUIRE(cm.passed());
    REQUIRE(cl.passed());
  }
}
