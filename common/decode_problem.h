/**
 * \file decode_problem.h
 * \brief The decoding problem: a few new queries per sequence against a KV cache, with
 *        grouped-query attention and a length of its own for every sequence.
 *
 * Q is [B, Hq, Nq, d]: the Nq newest tokens of each sequence. The cache K and V are
 * [B, Hkv, Nmax, d], of which sequence b uses its first L_b rows (its `kv_lens[b]`); the
 * rest is capacity and is never read. Query head hq reads KV head hq / (Hq / Hkv)
 * (grouped-query attention; Hq = Hkv is ordinary multi-head attention). O is
 * [B, Hq, Nq, d], the log-sum-exp [B, Hq, Nq] in fp32.
 *
 * The causal mask here is aligned bottom-right, as inference needs: the Nq queries are
 * the last Nq positions of the sequence, so query i (0-based) sees keys j <= L_b − Nq + i.
 * The training stages 01-07 align it top-left (query i sees j <= i); the two agree only
 * when Nq = L_b.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/dtype.h"

namespace fa {

/// One decoding problem. Build it with make_decode_problem(), which validates it.
struct DecodeProblem {
  int64_t batch = 1;       ///< B: sequences
  int64_t q_heads = 1;     ///< Hq: query heads
  int64_t kv_heads = 1;    ///< Hkv: key/value heads; Hq is a multiple of it
  int64_t seq_q = 1;       ///< Nq: new queries per sequence
  int64_t max_seq_kv = 1;  ///< Nmax: cache rows allocated per head
  std::vector<int64_t> kv_lens;  ///< L_b for each sequence, 1 <= L_b <= Nmax
  int64_t dim = 128;       ///< d
  float scale = 0.0883883476f;  ///< multiplies Q·Kᵀ; 1/sqrt(d) unless chosen otherwise
  bool causal = false;     ///< bottom-right causal mask (see the file comment)
  DType dtype = DType::F16;  ///< element type of Q, K, V and O

  int64_t group() const { return q_heads / kv_heads; }             ///< G = Hq / Hkv query heads per KV head
  int64_t rows() const { return batch * q_heads * seq_q; }         ///< query rows in all
  int64_t q_elems() const { return rows() * dim; }                 ///< elements of Q (and O)
  int64_t cache_elems() const { return batch * kv_heads * max_seq_kv * dim; }  ///< elements of K (and V)
  int64_t longest() const;   ///< max_b L_b
  int64_t total_kv() const;  ///< Σ_b L_b
  /// Keys query row `i` of sequence `b` sees: L_b, or L_b − Nq + i + 1 when causal.
  int64_t visible_keys(int64_t b, int64_t i) const {
    const int64_t len = kv_lens[static_cast<std::size_t>(b)];
    return causal ? len - seq_q + i + 1 : len;
  }
  /// Bytes of K and V a decoder must read at least once: every live cache row, once.
  double kv_bytes() const {
    return 2.0 * static_cast<double>(total_kv() * kv_heads * dim) * static_cast<double>(dtype_bytes(dtype));
  }
  /// Bytes of Q, K, V and O on the device (the whole cache capacity counted).
  std::size_t device_bytes() const {
    return static_cast<std::size_t>(2 * q_elems() + 2 * cache_elems()) * dtype_bytes(dtype);
  }
  /// 4·d per (query row, visible key): the two matmuls, masked keys not counted.
  double flops() const;
};

/**
 * Builds and validates a decoding problem. Every size must be at least 1, Hq a multiple
 * of Hkv, d one of supported_head_dims(). `kv_lens` holds one length per sequence, each
 * in [1, max_seq_kv]; empty means every sequence is max_seq_kv long. With `causal`,
 * every L_b must be at least Nq (the new queries are the sequence's last Nq positions).
 * \param batch B; \param q_heads Hq; \param kv_heads Hkv; \param seq_q Nq;
 * \param max_seq_kv Nmax; \param kv_lens the lengths L_b (or empty); \param dim d;
 * \param scale a positive scale, or 0 for 1/sqrt(d); \param causal the bottom-right mask;
 * \param dtype the element type of Q, K, V and O.
 * \throws InputError naming the bad value.
 */
DecodeProblem make_decode_problem(int64_t batch, int64_t q_heads, int64_t kv_heads, int64_t seq_q,
                                  int64_t max_seq_kv, std::vector<int64_t> kv_lens, int64_t dim,
                                  double scale = 0.0, bool causal = false, DType dtype = DType::F16);

/// One line such as "B=1 Hq=32 Hkv=8 Nq=1 L=32768 d=128 causal=no dtype=fp16"; ragged
/// lengths are shown as "L=[1, 900, 4096]" (or their range, when there are many).
std::string describe(const DecodeProblem& p);

}  // namespace fa
