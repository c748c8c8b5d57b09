/**
 * \file backward_attention.h
 * \brief Stage 10's host interface: the backward pass, dQ, dK and dV recomputed from the
 *        forward's log-sum-exp, in fp32 on CUDA cores.
 */
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/problem.h"
#include "stages/05_flash2/flash2_attention.h"

namespace fa::backward {

constexpr int Br = 64;  ///< query rows per tile (the inner loop)
constexpr int Bc = 64;  ///< key/value rows per tile (one block each)

/// Shared memory one block of the main kernel uses for head dimension d: K, V, Q, dO, P, dS.
std::size_t shared_bytes(int64_t d);

/// Device bytes the backward pass needs beyond its inputs and gradients: D, one float per
/// query row, and Q' = scale·log2(e)·Q, the Q the main kernel reads.
std::size_t workspace_bytes(const AttentionProblem& p);

/// Device pointers of one backward pass (all fp32, contiguous, row-major, 16-byte aligned
/// as cudaMalloc's are: the kernels read and add 4 floats at a time).
struct Tensors {
  const float* q;    ///< [B, H, Nq, d]
  const float* k;    ///< [B, H, Nkv, d]
  const float* v;    ///< [B, H, Nkv, d]
  const float* o;    ///< [B, H, Nq, d], the forward's output
  const float* d_o;  ///< [B, H, Nq, d], the gradient of the loss with respect to O
  const float* lse;  ///< [B, H, Nq], the forward's log-sum-exp of each row (natural log)
  float* dq;         ///< [B, H, Nq, d], written
  float* dk;         ///< [B, H, Nkv, d], written
  float* dv;         ///< [B, H, Nkv, d], written
  /// [B, H, Nq] or null: stage 05's m and 1/l of each row, when O came from stage 05. P is
  /// then rebuilt from them and `lse` is not read: exact at large logits, where a float32
  /// lse is not (the README's section on large logits).
  const flash2::RowStats* stats = nullptr;
};

/**
 * The gradients of attention, FlashAttention-2 style: D = rowsum(dO ∘ O) in one kernel
 * (which also zeroes dQ and writes Q' = scale·log2(e)·Q, so that S is stage 05's S bit for
 * bit), then one block per (K/V tile, batch·head) that loops over the Q
 * tiles, recomputes P = exp(scale·Q·Kᵀ − lse) (or 2^(S − m)/l from stage 05's RowStats)
 * tile by tile, keeps dK and dV of its tile in
 * registers, and adds its share of dQ into HBM with atomics. Causal is top-left, as in the
 * forward stages; tiles above the diagonal are skipped.
 * \param p the problem (fp32); \param t the tensors;
 * \param workspace workspace_bytes(p) bytes of device memory (receives D and Q').
 * \throws InputError for a dtype other than fp32.
 */
void attention_backward(const AttentionProblem& p, const Tensors& t, void* workspace);

/// HBM bytes one backward pass moves according to the IO model (see the README).
double hbm_bytes_model(const AttentionProblem& p);

/// FLOPs of one backward pass: five matrix products of 2·Nq·Nkv·d each, per head (2.5×
/// the forward's two). The causal mask is not subtracted, as in AttentionProblem::flops().
double flops(const AttentionProblem& p);

}  // namespace fa::backward
