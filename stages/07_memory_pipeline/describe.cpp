// Stage 07 as the shared demo driver sees it.
#include "common/demo.h"
#include "stages/07_memory_pipeline/pipelined_attention.h"
#include "stages/07_memory_pipeline/tuning.h"

namespace fa::pipeline {

StageDemo describe() {
  StageDemo stage;
  stage.id = "07_memory_pipeline";
  stage.title = "tensor-core FlashAttention-2 with a memory pipeline: cp.async double buffering, swizzled tiles";
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
        {"tiles", "Br = " + std::to_string(Br) + " query rows (" + std::to_string(16 * Tuned::m_tiles) +
                      " per warp), Bc = " + std::to_string(key_tile_rows(p.dim)) +
                      " key rows, K and V double-buffered; " +
                      format_bytes(static_cast<double>(shared_bytes(p.dim))) + " of shared memory per block"},
        {"grid", std::to_string(q_tiles * p.batch_heads()) + " blocks (" + std::to_string(q_tiles) +
                     " Q tiles x " + std::to_string(p.batch_heads()) + " heads), " + std::to_string(2 * Br / Tuned::m_tiles) +
                     " threads each, last Q tile first"},
        {"memory", "cp.async global -> shared, tile j+1 in flight while tile j is computed; XOR-swizzled tiles"}};
  };
  stage.variants = variants();
  return stage;
}

}  // namespace fa::pipeline
