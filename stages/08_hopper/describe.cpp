// Stage 08 as the shared demo driver sees it.
#include "common/demo.h"
#include "stages/08_hopper/hopper_attention.h"
#include "stages/08_hopper/tuning.h"

namespace fa::hopper {

StageDemo describe() {
  StageDemo stage;
  stage.id = "08_hopper";
  stage.title = "FlashAttention-2 on Hopper: TMA into a K/V ring, mbarriers, wgmma, a producer warpgroup";
  stage.dtypes = {DType::F16, DType::BF16};
  stage.head_dims = {64, 128};
  stage.writes_lse = true;
  stage.workspace_bytes = [](const AttentionProblem&) { return std::size_t{0}; };
  stage.run = [](const AttentionProblem& p, const DeviceTensors& t, void*) {
    attention(p, t.q, t.k, t.v, t.o, t.lse);
  };
  stage.hbm_bytes = hbm_bytes_model;
  stage.notes = [](const AttentionProblem& p) {
    const int br = block_rows(p.dim), c = consumers(p.dim);
    const int64_t q_tiles = (p.seq_q + br - 1) / br;
    const std::string tiles = std::to_string(q_tiles * p.batch_heads()) + " Q tiles (" + std::to_string(q_tiles) +
                              " a head x " + std::to_string(p.batch_heads()) + " heads)";
    return std::vector<std::pair<std::string, std::string>>{
        {"tiles", "Br = " + std::to_string(br) + " query rows (64 per consumer warpgroup), Bc = " + std::to_string(Bc) +
                      " key rows, a ring of " + std::to_string(Tuned::stages) + " K/V slots; " +
                      format_bytes(static_cast<double>(shared_bytes(p.dim))) + " of shared memory per block"},
        {"grid", std::string(persistent(p) ? "one block a multiprocessor working through " : "one block for each of ") + tiles +
                     ", " + std::to_string(128 * (1 + c)) + " threads each: a producer and " + std::to_string(c) +
                     " consumer warpgroups"},
        {"memory", "TMA global -> shared (128-byte swizzle), completing on mbarriers; wgmma reads shared memory directly"}};
  };
  stage.variants = variants();
  return stage;
}

}  // namespace fa::hopper
