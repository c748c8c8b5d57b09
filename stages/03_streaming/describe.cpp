// Stage 03 as the shared demo driver sees it (also used by later stages' --compare).
#include "common/demo.h"
#include "stages/01_naive/naive_attention.h"
#include "stages/03_streaming/streaming_attention.h"

namespace fa::streaming {

StageDemo describe() {
  StageDemo stage;
  stage.id = "03_streaming";
  stage.title = "one query per thread, streaming over all keys with online softmax";
  stage.writes_lse = true;
  stage.workspace_bytes = [](const AttentionProblem&) { return std::size_t{0}; };
  stage.run = [](const AttentionProblem& p, const DeviceTensors& t, void*) {
    const auto f = t.f32();
    attention(p, f.q, f.k, f.v, f.o, f.lse);
  };
  // Every query's thread asks for all of K and V: the bytes requested if no cache helped.
  stage.hbm_bytes = [](const AttentionProblem& p) {
    return bytes_read_per_query(p) * static_cast<double>(p.rows()) + static_cast<double>(p.q_elems()) * 4.0;
  };
  stage.notes = [](const AttentionProblem& p) {
    const double per_query = bytes_read_per_query(p);
    return std::vector<std::pair<std::string, std::string>>{
        {"vs stage 01", "stage 01 would need " + format_bytes(static_cast<double>(naive::workspace_bytes(p))) +
                            " for S/P at this shape; this stage needs none"},
        {"reads/query", format_bytes(per_query) + " (q, then all of K and V for its head); " +
                            format_bytes(per_query * static_cast<double>(p.rows())) +
                            " over all queries (the HBM model: no cache), mostly served by L1/L2 since a "
                            "warp reads the same key at once"}};
  };
  return stage;
}

}  // namespace fa::streaming
