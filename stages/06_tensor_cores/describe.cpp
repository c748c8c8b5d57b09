// Stage 06 as the shared demo driver sees it.
#include "common/demo.h"
#include "stages/06_tensor_cores/tensor_core_attention.h"
#include "stages/06_tensor_cores/tuning.h"

namespace fa::tensor_core {

StageDemo describe() {
  StageDemo stage;
  stage.id = "06_tensor_cores";
  stage.title = "FlashAttention-2 on tensor cores: mma.sync in fp16/bf16, P kept in registers";
  stage.dtypes = {DType::F16, DType::BF16};
  stage.writes_lse = true;
  stage.workspace_bytes = [](const AttentionProblem&) { return std::size_t{0}; };
  stage.run = [](const AttentionProblem& p, const DeviceTensors& t, void*) {
    attention(p, t.q, t.k, t.v, t.o, t.lse);
  };
  stage.hbm_bytes = hbm_bytes_model;
  stage.notes = [](const AttentionProblem& p) {
    const int64_t q_tiles = (p.seq_q + Br - 1) / Br;
    return std::vector<std::pair<std::string, std::string>>{
        {"tiles", "Br = " + std::to_string(Br) + " query rows (16 per warp), Bc = " + std::to_string(Bc) +
                      " key rows; " + format_bytes(static_cast<double>(shared_bytes(p.dim))) +
                      " of shared memory per block"},
        {"grid", std::to_string(q_tiles * p.batch_heads()) + " blocks (" + std::to_string(q_tiles) +
                     " Q tiles x " + std::to_string(p.batch_heads()) + " heads), " + std::to_string(32 * (Br / 16)) +
                     " threads each (a warp per 16 query rows)"},
        {"math", "mma.sync.m16n8k16 with " + std::string(dtype_name(p.dtype)) +
                     " operands and fp32 accumulators; softmax in fp32"}};
  };
  stage.variants = variants();
  return stage;
}

}  // namespace fa::tensor_core
