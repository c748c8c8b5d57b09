/**
 * \file tensor_core_backward.h
 * \brief Stage 11's host interface: the backward pass on tensor cores (mma.sync), fp16 or
 *        bf16 operands with fp32 accumulation, P recomputed from the forward's log-sum-exp.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/problem.h"

namespace fa::tc_backward {

constexpr int Br = 64;  ///< query rows per tile (the inner loop)

/// Bc, the key/value rows one block owns, for head dimension d.
int key_tile_rows(int64_t d);

/// Shared memory one block of the main kernel uses for head dimension d on the current device.
std::size_t shared_bytes(int64_t d);

/// Device bytes the backward pass needs beyond its inputs and gradients: each query row's
/// D and log-sum-exp (padded to whole Q tiles), and dQ's fp32 accumulator.
std::size_t workspace_bytes(const AttentionProblem& p);

/// Device pointers of one backward pass: Q, K, V, O, dO and the gradients in p.dtype (fp16
/// or bf16), contiguous, row-major, 16-byte aligned as cudaMalloc's are; the lse in fp32.
struct Tensors {
  const void* q;     ///< [B, H, Nq, d]
  const void* k;     ///< [B, H, Nkv, d]
  const void* v;     ///< [B, H, Nkv, d]
  const void* o;     ///< [B, H, Nq, d], the forward's output
  const void* d_o;   ///< [B, H, Nq, d], the gradient of the loss with respect to O
  const float* lse;  ///< [B, H, Nq], the forward's log-sum-exp of each row (natural log)
  void* dq;          ///< [B, H, Nq, d], written
  void* dk;          ///< [B, H, Nkv, d], written
  void* dv;          ///< [B, H, Nkv, d], written
};

/// Where each piece of the workspace starts: kernel 1 writes lse·log2(e) and D, padded
/// to whole Q tiles (lse = +inf and D = 0 in the padding), and zeroes dQacc, to which the
/// main kernel adds and from which kernel 3 rounds dQ. Stage 13 shares kernels 1 and 3.
struct Workspace {
  float* lse2;   ///< [B·H][padded_seq_q(p)]
  float* Dvec;   ///< [B·H][padded_seq_q(p)]
  float* dQacc;  ///< [B·H·Nq][d]
};

/// The rows padded_seq_q() rounds up to: whole Q tiles of this stage (Br = 64) and of stage 13
/// (64 or 128 rows), so that a kernel reads lse and D of a whole tile without a bounds check.
constexpr int PAD_ROWS = 128;
static_assert(PAD_ROWS % Br == 0, "the padding holds whole Q tiles of this stage");

/// Query rows of one head in the workspace: whole tiles of PAD_ROWS rows.
int64_t padded_seq_q(const AttentionProblem& p);

/// The pieces of a workspace of workspace_bytes(p) bytes.
Workspace split_workspace(const AttentionProblem& p, void* workspace);

/// Kernel 1, enqueued: D = rowsum(dO ∘ O) and lse·log2(e) into `ws`, dQacc zeroed. O and dO
/// (t.o, t.d_o in p.dtype) are read through layout.o and layout.d_o, 16 bytes a thread where
/// both start on 16 bytes with strides of whole 16 bytes, else 2. `stage` begins the
/// message of a refusal. \throws InputError when the grid would be too large.
void prepare(const AttentionProblem& p, const Tensors& t, const Layout& layout, const Workspace& ws,
             const std::string& stage);

/// Kernel 3, enqueued: dQ (contiguous, p.dtype) = scale·dQacc, rounded, 16 bytes a store where
/// dq starts on 16 bytes, else 4. `swizzled`: dQacc as
/// stage 13 lays it out, each row's 8-column groups in the order of its bank-conflict-free
/// stores (column c of head row q at c XOR 8·(q % 8); the dims are 64 and 128).
void finish_dq(const AttentionProblem& p, const Workspace& ws, void* dq, bool swizzled);

/**
 * The gradients of attention on tensor cores, FlashAttention-2's backward algorithm (stage
 * 10's) with every product an `mma.sync`: D = rowsum(dO ∘ O) in one kernel (which also
 * zeroes dQ's fp32 accumulator), then one block per (K/V tile, batch·head) that loops over
 * the Q tiles, keeps dK and dV of its tile in registers and adds its share of dQ into the
 * accumulator with atomics, then one kernel that rounds dQ to p.dtype. Causal is top-left;
 * tiles above the diagonal are skipped.
 * \param p the problem (fp16 or bf16); \param t the tensors;
 * \param workspace workspace_bytes(p) bytes of device memory, 16-byte aligned.
 * \throws InputError for fp32 or an unsupported head dimension.
 */
void attention_backward(const AttentionProblem& p, const Tensors& t, void* workspace);

/**
 * attention_backward() with Q, K, V, O and dO where `layout` says (the last dimension contiguous, each
 * stride a multiple of 16 bytes): a PyTorch view such as `qkv.view(B, N, 3, H, d).permute(2,
 * 0, 3, 1, 4)` is read where it lies. dQ, dK and dV are written contiguous [B, H, N, d].
 * \throws InputError for strides the 16-byte copies cannot follow, and as above.
 */
void attention_backward_strided(const AttentionProblem& p, const Tensors& t, void* workspace, const Layout& layout);

/// HBM bytes one backward pass moves according to the IO model (see the README).
double hbm_bytes_model(const AttentionProblem& p);

/// The same model for a main kernel with blocks of `bc` keys (stage 13's).
double hbm_bytes_model_for(const AttentionProblem& p, int bc);

/// FLOPs of one backward pass: five matrix products of 2·Nq·Nkv·d each, per head (2.5×
/// the forward's two). The causal mask is not subtracted, as in AttentionProblem::flops().
double flops(const AttentionProblem& p);

}  // namespace fa::tc_backward
