/**
 * \file split_kv_decoding.h
 * \brief Stage 09's host interface: decoding with the KV cache split across blocks, the
 *        partial results merged with stage 02's rule.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/decode_problem.h"

namespace fa::decode {

constexpr int WARPS = 4;             ///< warps per block; each streams its own keys
constexpr int THREADS = 32 * WARPS;  ///< threads per block
constexpr int64_t MIN_CHUNK = 256;   ///< fewest keys a split gets from the automatic choice
constexpr int MMA_ROWS = 16;         ///< query rows a tensor-core block serves: the M of m16n8k16

/// How the work is cut: which rows a block serves and which keys.
struct Plan {
  /// Query rows of one KV head a block serves: 1 or 4 on CUDA cores, MMA_ROWS (16) on tensor
  /// cores (fp16 and bf16 with at least 2 rows); a compile-time choice.
  int rows_per_block = 1;
  int64_t row_groups = 1;  ///< blocks that share one KV head's rows: ⌈G·Nq / rows_per_block⌉
  int64_t chunk = 1;       ///< keys per split (the last split of a sequence may have fewer)
  int64_t splits = 1;      ///< splits of the longest sequence, ⌈max L_b / chunk⌉ (sequence b has ⌈L_b / chunk⌉)
  int64_t chunks = 1;      ///< splits of all sequences together, Σ_b ⌈L_b / chunk⌉
  /// Blocks of the split kernel per KV head (of every sequence together): row_groups·chunks.
  int64_t blocks() const { return row_groups * chunks; }
};

/**
 * The plan for problem `p` on a GPU of `sm_count` multiprocessors. Every sequence's cache
 * is cut into splits of `chunk` keys, ⌈L_b / chunk⌉ for sequence b. With `splits` = 0 the
 * chunk is the smallest with which all blocks fill the GPU once: as many as fit on it at
 * the same time, at most 4 per multiprocessor (tuning.h), with the longest sequence
 * cut into at most L / MIN_CHUNK splits. Otherwise the longest sequence gets `splits` (at
 * most its length: a split has at least one key), and the others as many as that chunk gives.
 * \throws InputError if the grid would exceed CUDA's limits.
 */
Plan make_plan(const DecodeProblem& p, int sm_count, int64_t splits = 0);

/// Device bytes the plan needs beyond Q, K, V, O and lse: each split's partial O, m and l.
std::size_t workspace_bytes(const DecodeProblem& p, const Plan& plan);

/**
 * O = softmax(scale·Q·Kᵀ)·V for every new query against its sequence's cache (see
 * decode_problem.h), in p.dtype (fp32, fp16 or bf16), by the plan's blocks: each reads its
 * split of one KV head's cache once for all the query rows it serves, and a merge kernel
 * combines the splits. All pointers are device pointers.
 * \param p the problem; \param plan from make_plan(p, ...);
 * \param Q [B, Hq, Nq, d]; \param K, V the cache [B, Hkv, Nmax, d];
 * \param kv_lens B lengths (int32), each in [1, Nmax]; \param O [B, Hq, Nq, d] (out);
 * \param lse if not null, receives each row's log-sum-exp (fp32, B·Hq·Nq values);
 * \param workspace workspace_bytes(p, plan) bytes (may be null when splits == 1).
 * \throws InputError for an unsupported head dimension.
 */
void attention(const DecodeProblem& p, const Plan& plan, const void* Q, const void* K, const void* V,
               const int* kv_lens, void* O, float* lse, void* workspace);

/// Bytes that must cross HBM: K and V of every live cache row once, Q and O once, and the
/// partial results written and read back once when there are several splits.
double hbm_bytes_model(const DecodeProblem& p, const Plan& plan);

/// Whether the plan's blocks use the tensor cores (rows_per_block == MMA_ROWS).
inline bool uses_tensor_cores(const Plan& plan) { return plan.rows_per_block == MMA_ROWS; }

/// One line on the plan, e.g. "16 rows a block (tensor cores), 1 group per KV head, 3 splits of
/// 10923 keys: 384 blocks of 128 threads, then a merge kernel", or for a ragged batch "...,
/// splits of 2731 keys, 1 to 12 a sequence (100 in all): ...".
std::string describe(const Plan& plan, const DecodeProblem& p);

}  // namespace fa::decode
