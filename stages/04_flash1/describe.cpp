// Stage 04 as the shared demo driver sees it (also used by later stages' --compare).
#include "common/demo.h"
#include "stages/04_flash1/flash1_attention.h"

namespace fa::flash1 {

StageDemo describe() {
  StageDemo stage;
  stage.id = "04_flash1";
  stage.title = "tiled, fused FlashAttention-1: K/V tiles outer, Q tiles inner, m/l/O in HBM";
  stage.workspace_bytes = workspace_bytes;
  stage.run = [](const AttentionProblem& p, const DeviceTensors& t, void* workspace) {
    float* m = static_cast<float*>(workspace);
    const auto f = t.f32();
    attention(p, f.q, f.k, f.v, f.o, m, m + p.rows());
  };
  stage.hbm_bytes = hbm_bytes_model;
  stage.notes = [](const AttentionProblem& p) {
    return std::vector<std::pair<std::string, std::string>>{
        {"tiles", "Br = " + std::to_string(Br) + " query rows, Bc = " + std::to_string(Bc) + " key rows; " +
                      format_bytes(static_cast<double>(shared_bytes(p.dim))) + " of shared memory per block"},
        {"grid", std::to_string(p.batch_heads()) + " blocks, one per (batch, head), 256 threads each"}};
  };
  return stage;
}

}  // namespace fa::flash1
