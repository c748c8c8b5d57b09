/**
 * \file hopper_attention.h
 * \brief Stage 08's host interface: FlashAttention-2 on Hopper's own machinery (wgmma,
 *        TMA, mbarrier, warp specialisation). Built for sm_90a on the GPU; the CPU backend
 *        runs it through its emulation of those instructions.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/problem.h"

namespace fa {
struct StageDemo;
}  // namespace fa

namespace fa::hopper {

/// This stage as the shared demo driver sees it.
StageDemo describe();

constexpr int Bc = 128;  ///< key/value rows per tile (one TMA box each of K and V)

/// Query rows of a block (Br) at head dim d: 64 per consumer warpgroup.
int block_rows(int64_t d);

/// Consumer warpgroups of a block at head dim d.
int consumers(int64_t d);

/// Whether the kernel runs with one block a multiprocessor, each taking Q tiles (or pairs
/// of them) one after another, rather than a block for each Q tile: at d = 64 always, and
/// at d = 128 when a head has at most 64 K/V tiles (Nkv ≤ 8192), where a Q tile's run is
/// short and starting and ending it (the wait for its first copies, the stores of O) is a
/// larger share of it; at d = 128 over long K/V sequences the static schedule's last round
/// costs about what it saves (LOG.md measures both).
bool persistent(const AttentionProblem& p);

/// Whether this build has stage 08's kernels (nvcc with sm_90a) and this process's GPU
/// can run them (compute capability 9.0; the CPU backend reports 9.0 and emulates them).
/// \returns an empty string if so, else why not.
std::string unavailable_reason();

/// Shared memory one block uses for head dimension d.
std::size_t shared_bytes(int64_t d);

/// Refuses a head dimension that stage 08's machinery (and the stages built on it) has no
/// kernel for, with InputError("<stage>: head dim d is not supported (64 or 128)").
/// \param d the head dimension; \param stage the name that begins the message, e.g. "stage 13".
void require_head_dim(int64_t d, const char* stage);

/**
 * O = softmax(scale·Q·Kᵀ)·V in fp16 or bf16 on a Hopper GPU, d = 64 or 128.
 * \param p the problem; \param Q, K, V the inputs; \param O the output; \param lse if
 * not null, receives each query row's log-sum-exp in fp32 (B·H·Nq floats).
 * \throws InputError for fp32 or another head dimension; NoGpuError on a GPU that is not a Hopper.
 */
void attention(const AttentionProblem& p, const void* Q, const void* K, const void* V, void* O,
               float* lse = nullptr);

/**
 * attention() on tensors that lie where `layout` says (the last dimension contiguous, every
 * stride a multiple of 16 bytes and, along a dimension longer than 1, not 0): TMA reads
 * Q, K and V through their strides and O is written through its own, so a view such as
 * PyTorch's `qkv.view(B, N, 3, H, d).permute(2, 0, 3, 1, 4)` needs no copy. lse stays
 * contiguous [B, H, Nq]. O's strides must not make two of its elements one.
 * \throws InputError for strides TMA cannot follow, and as attention() above.
 */
void attention_strided(const AttentionProblem& p, const void* Q, const void* K, const void* V, void* O, float* lse,
                       const Layout& layout);

/// HBM bytes this kernel moves according to the IO model: Q and O once, K and V once per
/// Q tile of block_rows(d) rows.
double hbm_bytes_model(const AttentionProblem& p);

}  // namespace fa::hopper
