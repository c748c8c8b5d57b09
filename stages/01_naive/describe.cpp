// Stage 01 as the shared demo driver sees it (also used by later stages' --compare).
#include "common/demo.h"
#include "stages/01_naive/naive_attention.h"

namespace fa::naive {

StageDemo describe() {
  StageDemo stage;
  stage.id = "01_naive";
  stage.title = "naive three-kernel attention (S = scale*Q*K^T, softmax, O = P*V)";
  stage.workspace_bytes = workspace_bytes;
  stage.run = [](const AttentionProblem& p, const DeviceTensors& t, void* workspace) {
    const auto f = t.f32();
    attention(p, f.q, f.k, f.v, f.o, static_cast<float*>(workspace));
  };
  // Q, K, V read and O written once, plus the N×N matrix four times (write S, read S,
  // write P, read P); the softmax's repeated reads of a row hit in cache.
  stage.hbm_bytes = [](const AttentionProblem& p) {
    return static_cast<double>(p.qkvo_bytes()) + 4.0 * static_cast<double>(workspace_bytes(p));
  };
  stage.notes = [](const AttentionProblem& p) {
    const double s_bytes = static_cast<double>(workspace_bytes(p));
    return std::vector<std::pair<std::string, std::string>>{
        {"N x N", "S/P buffer " + format_bytes(s_bytes) + " (" + std::to_string(p.batch_heads()) + " heads x " +
                      std::to_string(p.seq_q) + " x " + std::to_string(p.seq_kv) + " floats), " +
                      std::to_string(static_cast<long long>(s_bytes)) + " bytes"}};
  };
  return stage;
}

}  // namespace fa::naive
