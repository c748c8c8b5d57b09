// Grades stage 04's exercises: the learner's copy of flash1_attention.cu through the battery
// every attention stage passes (tests/stage_check.h: ragged lengths, every head dim, causal,
// logits in the hundreds; outputs poisoned), O checked, and the final m and l as the
// log-sum-exp m + log(l). `cmake --workflow --preset exercises` runs them.
#include <cmath>
#include <vector>

#include "common/cuda_check.h"
#include "common/device_buffer.h"
#include "stages/04_flash1/flash1_attention.h"
#include "tests/catch.h"
#include "tests/stage_check.h"

namespace {

void run_flash1(const fa::AttentionProblem& p, const fa::DeviceTensors& t) {
  fa::DeviceBuffer<float> m(static_cast<size_t>(p.rows())), l(static_cast<size_t>(p.rows()));
  m.fill_bytes(fa::kPoisonByte);
  l.fill_bytes(fa::kPoisonByte);
  const auto f = t.f32();
  fa::flash1::attention(p, f.q, f.k, f.v, f.o, m.data(), l.data());
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> mh = m.download(), lh = l.download();
  std::vector<float> lse(mh.size());
  for (size_t r = 0; r < lse.size(); ++r) lse[r] = mh[r] + std::log(lh[r]);
  FA_CUDA_CHECK(cudaMemcpy(t.lse, lse.data(), lse.size() * sizeof(float), cudaMemcpyHostToDevice));
}

void attention_battery() { fa::test::check_attention_stage(run_flash1, /*with_lse=*/true, /*causal=*/true); }

}  // namespace

TEST_CASE("04-tile-stats: each tile's m~, l~ and P~", "[04-tile-stats]") { attention_battery(); }

TEST_CASE("04-write-back: m, l and O combined and written back to HBM", "[04-write-back]") { attention_battery(); }

TEST_CASE("04-bug: find the bug", "[04-bug]") { attention_battery(); }
