// Grades stage 09's exercises: the learner's copy of split_kv_decoding.cu against the float64
// reference: ragged cache lengths (1 included), split counts that divide none of them,
// grouped-query attention, several new queries under the causal mask, large logits, fp16 and
// fp32; outputs and workspace poisoned before each run. `cmake --workflow --preset exercises`
// runs them.
#include <cuda_runtime.h>

#include <vector>

#include "common/cuda_check.h"
#include "common/decode_problem.h"
#include "common/demo.h"
#include "common/device.h"
#include "common/device_buffer.h"
#include "common/random.h"
#include "common/verify.h"
#include "stages/09_split_kv_decoding/split_kv_decoding.h"
#include "tests/catch.h"

namespace {

void require_decode(const fa::DecodeProblem& p, int64_t splits, uint64_t seed, float magnitude = 1.0f) {
  const fa::decode::Plan plan = fa::decode::make_plan(p, fa::require_device().sm_count, splits);
  const fa::AttentionInputs in = fa::random_decode_inputs(p, seed, magnitude);
  const fa::DeviceInputs inputs = fa::upload_inputs(in.q, in.k, in.v, p.dtype);
  const fa::DeviceBuffer<int> lens(std::vector<int>(p.kv_lens.begin(), p.kv_lens.end()));
  fa::DeviceBuffer<unsigned char> o(static_cast<size_t>(p.q_elems()) * fa::dtype_bytes(p.dtype));
  fa::DeviceBuffer<unsigned char> ws(fa::decode::workspace_bytes(p, plan));
  fa::DeviceBuffer<float> lse(static_cast<size_t>(p.rows()));
  for (auto* b : {&o, &ws}) b->fill_bytes(fa::kPoisonByte);
  lse.fill_bytes(fa::kPoisonByte);
  fa::decode::attention(p, plan, inputs.q.data(), inputs.k.data(), inputs.v.data(), lens.data(), o.data(), lse.data(),
                        ws.data());
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> got = fa::download_as_float(o.data(), static_cast<size_t>(p.q_elems()), p.dtype);
  const std::vector<float> got_lse = lse.download();
  const fa::AttentionCheck c = fa::check_decode(p, in, got, fa::sample_indices(p.rows(), p.rows()), &got_lse);
  INFO(fa::describe(p) << ", " << plan.splits << " splits of " << plan.chunk << " keys");
  INFO("O: " << fa::describe(c.o, fa::decode_output_namer(p, c.rows)));
  INFO("lse: " << fa::describe(c.lse, fa::decode_row_namer(p, c.rows, "lse")));
  REQUIRE(c.passed());
}

void decode_battery() {
  uint64_t seed = 70;
  for (fa::DType t : {fa::DType::F16, fa::DType::F32}) {
    for (int64_t splits : {1, 3, 7}) {  // 1: nothing to merge
      const fa::DecodeProblem p = fa::make_decode_problem(2, 4, 2, 1, 1000, {1, 1000}, 64, 0.0, false, t);
      require_decode(p, splits, ++seed);
    }
  }
  const fa::DecodeProblem gqa = fa::make_decode_problem(3, 8, 2, 1, 700, {700, 333, 5}, 128, 0.0, false, fa::DType::F16);
  require_decode(gqa, 0, 80);
  const fa::DecodeProblem causal = fa::make_decode_problem(2, 2, 2, 4, 300, {300, 77}, 32, 0.0, true, fa::DType::F16);
  require_decode(causal, 5, 81);
  const fa::DecodeProblem large = fa::make_decode_problem(1, 2, 2, 1, 500, {}, 64, 0.0, false, fa::DType::F32);
  require_decode(large, 4, 82, 30.0f);
}

}  // namespace

TEST_CASE("09-merge: the splits' partial results merged by stage 02's rule", "[09-merge]") { decode_battery(); }

TEST_CASE("09-bug: find the bug", "[09-bug]") { decode_battery(); }
