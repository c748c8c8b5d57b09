// Stage 05 as the shared demo driver sees it.
#include "common/demo.h"
#include "stages/05_flash2/flash2_attention.h"

namespace fa::flash2 {

StageDemo describe() {
  StageDemo stage;
  stage.id = "05_flash2";
  stage.title = "FlashAttention-2: Q tile outer and parallel, m/l/O on chip, one division at the end";
  stage.writes_lse = true;
  stage.workspace_bytes = [](const AttentionProblem&) { return std::size_t{0}; };
  stage.run = [](const AttentionProblem& p, const DeviceTensors& t, void*) {
    const auto f = t.f32();
    attention(p, f.q, f.k, f.v, f.o, f.lse);
  };
  stage.block_sparse = StageDemo::BlockSparse{Br, Bc, [](const AttentionProblem& p, const DeviceTensors& t,
                                                          const uint8_t* flags) {
                                                  const auto f = t.f32();
                                                  attention(p, f.q, f.k, f.v, f.o, f.lse, flags);
                                                }};
  stage.hbm_bytes = hbm_bytes_model;
  stage.notes = [](const AttentionProblem& p) {
    const int64_t q_tiles = (p.seq_q + Br - 1) / Br;
    return std::vector<std::pair<std::string, std::string>>{
        {"tiles", "Br = " + std::to_string(Br) + " query rows, Bc = " + std::to_string(Bc) + " key rows; " +
                      format_bytes(static_cast<double>(shared_bytes(p.dim))) + " of shared memory per block"},
        {"grid", std::to_string(q_tiles * p.batch_heads()) + " blocks (" + std::to_string(q_tiles) +
                     " Q tiles x " + std::to_string(p.batch_heads()) + " heads), 256 threads each"}};
  };
  return stage;
}

}  // namespace fa::flash2
