/**
 * \file stages/01_naive/demo.cpp
 * \brief Stage 01's demo: runs naive attention, checks it, times it, and shows the
 *        size of the N×N matrix it has to keep in device memory.
 *
 * \code
 * stage01_naive                                   # B=4 H=32 N=4096 d=64
 * stage01_naive --seq-q 1000 --seq-kv 257 --dim 128 --causal
 * stage01_naive --batch 8 --heads 64 --seq-q 65536 --seq-kv 65536   # refused: S needs 8 TiB
 * \endcode
 */
#include "common/demo.h"
#include "stages/01_naive/naive_attention.h"

/// Describes stage 01 to the shared demo driver and runs it.
int main(int argc, char** argv) {
  fa::StageDemo stage;
  stage.id = "01_naive";
  stage.title = "naive three-kernel attention (S = scale*Q*K^T, softmax, O = P*V)";
  stage.workspace_bytes = fa::naive::workspace_bytes;
  stage.run = [](const fa::AttentionProblem& p, const fa::DeviceTensors& t, void* workspace) {
    fa::naive::attention(p, t.q, t.k, t.v, t.o, static_cast<float*>(workspace));
  };
  stage.notes = [](const fa::AttentionProblem& p) {
    const double s_bytes = static_cast<double>(fa::naive::workspace_bytes(p));
    return std::vector<std::pair<std::string, std::string>>{
        {"N x N", "S/P buffer " + fa::format_bytes(s_bytes) + " (" + std::to_string(p.batch_heads()) +
                      " heads x " + std::to_string(p.seq_q) + " x " + std::to_string(p.seq_kv) +
                      " floats), " + std::to_string(static_cast<long long>(s_bytes)) + " bytes"},
        {"HBM model", fa::format_bytes(4.0 * s_bytes) +
                          " of S/P traffic: kernel 1 writes S, the softmax reads S and writes P, "
                          "kernel 3 reads P"}};
  };
  return fa::run_stage_demo(argc, argv, stage);
}
