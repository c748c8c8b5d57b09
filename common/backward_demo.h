/**
 * \file backward_demo.h
 * \brief The demo of a backward stage (10, 11): one training step's attention, a forward
 *        stage's pass and then the backward stage's, the gradients checked against the
 *        float64 reference and the backward pass timed.
 */
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "common/demo.h"
#include "common/problem.h"

namespace fa {

/// Device pointers of one backward pass, every tensor in p.dtype but the lse (fp32).
struct BackwardTensors {
  const void* q;     ///< [B, H, Nq, d]
  const void* k;     ///< [B, H, Nkv, d]
  const void* v;     ///< [B, H, Nkv, d]
  const void* o;     ///< [B, H, Nq, d], the forward's output
  const void* d_o;   ///< [B, H, Nq, d], the gradient of the loss with respect to O
  const float* lse;  ///< [B, H, Nq], the forward's log-sum-exp of each row
  void* dq;          ///< [B, H, Nq, d], written
  void* dk;          ///< [B, H, Nkv, d], written
  void* dv;          ///< [B, H, Nkv, d], written
  /// The forward's statistics of each row besides the lse (BackwardStageDemo::stats_bytes
  /// a row), or null where it hands none.
  const void* stats = nullptr;
};

/// Enqueues one backward pass: `workspace` has the stage's workspace_bytes(p) bytes.
using BackwardStageRun = std::function<void(const AttentionProblem&, const BackwardTensors&, void* workspace)>;

/// What a backward stage tells the demo about itself.
struct BackwardStageDemo {
  std::string id;     ///< "10_backward": the stage's folder name
  std::string title;  ///< the report's title
  std::string about;  ///< what --help says under the program's name
  std::vector<DType> dtypes;  ///< element types it runs; the first is the default --dtype
  std::vector<int64_t> head_dims;  ///< head dims it runs; empty: every one of supported_head_dims()
  std::string forward_name;   ///< the forward stage that runs first, e.g. "stage 05"
  /// Enqueues that forward pass: O (p.dtype) and each row's lse from Q, K, V, and into
  /// `stats` (null where stats_bytes is 0) the row statistics the backward pass reads.
  std::function<void(const AttentionProblem&, const void* q, const void* k, const void* v, void* o, float* lse,
                     void* stats)>
      forward;
  std::size_t stats_bytes = 0;  ///< bytes a row of the forward's statistics besides the lse (stage 05's m, 1/l)
  BackwardStageRun run;                          ///< the finished backward pass
  std::vector<Variant<BackwardStageRun>> variants;  ///< what --variant may pick (empty: no such flag)
  std::function<std::size_t(const AttentionProblem&)> workspace_bytes;  ///< device bytes beyond the tensors
  std::string workspace_what;                    ///< what the workspace holds, for the report
  std::function<double(const AttentionProblem&)> hbm_bytes;  ///< the IO model's bytes of one pass
  std::function<double(const AttentionProblem&)> flops;      ///< FLOPs of one pass
  std::function<std::string(const AttentionProblem&)> tiles;  ///< the report's "tiles" line
};

/**
 * Runs a backward stage's demo through run_demo(): random (or loaded) Q, K, V and dO, the
 * forward pass, the gradients poisoned, one backward pass checked on whole heads
 * (`--check-heads`), warm-up and timed runs, `--compare` with the forward pass's time,
 * `--save` and `--load` of q, k, v, do (and o, dq, dk, dv saved).
 * \returns the process exit code (fa::ExitCode); never throws.
 */
int run_backward_demo(int argc, const char* const* argv, const BackwardStageDemo& stage);

}  // namespace fa
