// Stage 02 inside attention, as the demo driver and the benchmark see it: stage 01's
// pipeline with the online softmax as its middle step.
#include "common/demo.h"
#include "stages/01_naive/naive_attention.h"
#include "stages/02_online_softmax/online_softmax.h"

namespace fa::online {

StageDemo describe() {
  StageDemo stage = naive::describe();
  stage.id = "02_online_softmax";
  stage.title = "stage 01 with the online softmax (m and l in one sweep); S still in HBM";
  stage.run = [](const AttentionProblem& p, const DeviceTensors& t, void* workspace) {
    const auto f = t.f32();
    naive::attention(p, f.q, f.k, f.v, f.o, static_cast<float*>(workspace), softmax_rows_only);
  };
  return stage;
}

}  // namespace fa::online
