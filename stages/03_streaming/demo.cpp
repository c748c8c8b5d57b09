/**
 * \file stages/03_streaming/demo.cpp
 * \brief Stage 03's demo: streaming attention with no workspace; it reports what stage
 *        01 would have needed for the same shape and the bytes each query reads.
 *
 * \code
 * stage03_streaming                                       # B=4 H=32 N=4096 d=64
 * stage03_streaming --batch 1 --heads 8 --seq-q 65536 --seq-kv 65536   # S would be 128 GiB
 * \endcode
 */
#include "common/demo.h"
#include "stages/01_naive/naive_attention.h"
#include "stages/03_streaming/streaming_attention.h"

/// Describes stage 03 to the shared demo driver and runs it.
int main(int argc, char** argv) {
  fa::StageDemo stage;
  stage.id = "03_streaming";
  stage.title = "one query per thread, streaming over all keys with online softmax";
  stage.writes_lse = true;
  stage.workspace_bytes = [](const fa::AttentionProblem&) { return std::size_t{0}; };
  stage.run = [](const fa::AttentionProblem& p, const fa::DeviceTensors& t, void*) {
    fa::streaming::attention(p, t.q, t.k, t.v, t.o, t.lse);
  };
  stage.notes = [](const fa::AttentionProblem& p) {
    const double per_query = fa::streaming::bytes_read_per_query(p);
    return std::vector<std::pair<std::string, std::string>>{
        {"vs stage 01", "stage 01 would need " + fa::format_bytes(static_cast<double>(fa::naive::workspace_bytes(p))) +
                            " for S/P at this shape; this stage needs none"},
        {"reads/query", fa::format_bytes(per_query) + " (q, then all of K and V for its head); " +
                            fa::format_bytes(per_query * static_cast<double>(p.rows())) +
                            " over all queries, mostly served by L1/L2 since a warp reads the same key at once"}};
  };
  return fa::run_stage_demo(argc, argv, stage);
}
