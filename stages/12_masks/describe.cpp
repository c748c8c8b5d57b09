// Stage 12 as the shared demo driver sees it.
#include <memory>

#include "common/demo.h"
#include "stages/08_hopper/tuning.h"
#include "stages/12_masks/masked_attention.h"

namespace fa::masks {

namespace {

/// The demo's lines on a plan: the blocks of each kind, and how Q tiles go to blocks.
std::vector<std::pair<std::string, std::string>> plan_notes(const AttentionProblem& p, const Plan& plan) {
  const BlockClasses& c = plan.classes();
  const int64_t all = c.q_tiles * c.kv_tiles;
  return {{"blocks", std::to_string(all) + " of " + std::to_string(Br) + "x" + std::to_string(Bc) + " a head: " +
                         std::to_string(c.count(BlockKind::empty)) + " empty (skipped), " +
                         std::to_string(c.count(BlockKind::partial)) + " partial (masked score by score), " +
                         std::to_string(c.count(BlockKind::full)) + " full"},
          {"grid", std::string(plan.persistent(p.dim) ? "one block a multiprocessor, Q tiles dealt by their work"
                                                      : "one block for each Q tile, heaviest first") +
                       "; the longest list has " + std::to_string(plan.longest()) + " blocks"}};
}

}  // namespace

StageDemo describe() {
  StageDemo stage;
  stage.id = "12_masks";
  stage.title = "masks that skip work: sliding windows, packed documents and block-sparse masks on Hopper";
  stage.dtypes = {DType::F16, DType::BF16};
  stage.head_dims = {64, 128};
  stage.writes_lse = true;
  stage.workspace_bytes = [](const AttentionProblem&) { return std::size_t{0}; };
  // Without a mask flag: the causal mask or none, its plan made once for the problem.
  auto cached = std::make_shared<std::unique_ptr<Plan>>();
  auto cached_for = std::make_shared<AttentionProblem>();
  const auto plan_for = [cached, cached_for](const AttentionProblem& p) -> const Plan& {
    if (!*cached || cached_for->seq_q != p.seq_q || cached_for->seq_kv != p.seq_kv || cached_for->causal != p.causal) {
      *cached = std::make_unique<Plan>(p, Mask{});
      *cached_for = p;
    }
    return **cached;
  };
  stage.run = [plan_for](const AttentionProblem& p, const DeviceTensors& t, void*) {
    attention(p, t.q, t.k, t.v, t.o, t.lse, plan_for(p));
  };
  stage.hbm_bytes = [plan_for](const AttentionProblem& p) { return hbm_bytes_model(p, plan_for(p)); };
  stage.notes = [plan_for](const AttentionProblem& p) { return plan_notes(p, plan_for(p)); };
  stage.masked = StageDemo::Masked{Br, Bc, [](const StageDemo& as_is, const AttentionProblem& p, const Mask& mask) {
                                     auto plan = std::make_shared<const Plan>(p, mask);
                                     StageDemo masked = as_is;
                                     masked.run = [plan](const AttentionProblem& q, const DeviceTensors& t, void*) {
                                       attention(q, t.q, t.k, t.v, t.o, t.lse, *plan);
                                     };
                                     masked.notes = [plan](const AttentionProblem& q) { return plan_notes(q, *plan); };
                                     masked.hbm_bytes = [plan](const AttentionProblem& q) {
                                       return hbm_bytes_model(q, *plan);
                                     };
                                     return masked;
                                   }};
  return stage;
}

}  // namespace fa::masks
