// BUG(exercise 03-bug): this copy of streaming_attention.cu differs from a correct kernel in one place, and the tests of exercise 03-bug fail. Find it, fix it, then delete this line.
/**
 * \file streaming_attention.cu
 * \brief Stage 03: one query per thread, streaming over every key with online softmax.
 *
 * The idea: stage 02's recurrence, applied to one row of S at a time, means a score
 * never has to be stored. Each thread owns one query row q and walks through all Nkv
 * keys and values, keeping only m, l and the unnormalised output acc (d floats):
 *
 *     for j in 0 .. Nkv-1:
 *         s     = scale · q·k_j
 *         m_new = max(m, s)
 *         alpha = exp(m − m_new)          rescales what was accumulated so far
 *         l     = alpha·l + exp(s − m_new)
 *         acc   = alpha·acc + exp(s − m_new)·v_j
 *         m     = m_new
 *     O = acc / l                         written once
 *
 * What changed since stage 01: no S, no P, no second and third kernel. The scores exist
 * one at a time, in a register.
 * Cost: no workspace at all (stage 01: B·H·Nq·Nkv floats). But every thread reads all
 * of K and V, (2·Nkv·d + d)·4 bytes per query, and threads share nothing on purpose:
 * no shared memory, no tiles. That is why it is slow, and what stage 04 fixes.
 *
 * Run: `stage03_streaming --batch 4 --heads 32 --seq-q 4096 --seq-kv 4096 --dim 64`
 */
#include "stages/03_streaming/streaming_attention.h"

#include "common/cuda_check.h"
#include "common/head_dim.h"
#include "common/stream.h"

namespace fa::streaming {

constexpr int THREADS = 128;  ///< query rows per block

/// One thread per query row r = (b·H + h)·Nq + i. D is the head dimension, a
/// compile-time constant so that q and acc can live in registers.
template <int D>
__global__ void streaming_attention_kernel(const float* Q, const float* K, const float* V, float* O,
                                           float* lse, int64_t rows, int64_t seq_q, int64_t seq_kv,
                                           float scale, bool causal) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const int64_t bh = r / seq_q, i = r % seq_q;
  const float* Kh = K + bh * seq_kv * D;
  const float* Vh = V + bh * seq_kv * D;

  float q[D];  // the query row, pre-multiplied by the scale
  for (int c = 0; c < D; ++c) q[c] = Q[r * D + c] * scale;

  float m = -INFINITY, l = 0.0f;
  float acc[D];
  for (int c = 0; c < D; ++c) acc[c] = 0.0f;

  // Causal (top-left): query i sees keys 0..i only; key 0 is always visible.
  const int64_t visible = causal ? (i + 1 < seq_kv ? i + 1 : seq_kv) : seq_kv;
  for (int64_t j = 0; j < visible; ++j) {
    // All threads of a warp read the same k_j and v_j at once: one broadcast each,
    // 16 bytes at a time (rows are 16-byte aligned: d is a multiple of 16).
    const float4* k4 = reinterpret_cast<const float4*>(Kh + j * D);
    float s = 0.0f;
    for (int c = 0; c < D / 4; ++c) {
      const float4 k = k4[c];
      s += q[4 * c] * k.x + q[4 * c + 1] * k.y + q[4 * c + 2] * k.z + q[4 * c + 3] * k.w;
    }
    // exercise 03-rescale: fold key j into m, l and acc, acc rescaled by alpha = exp(m - m_new)
    //   stub: (void)s;
    const float m_new = fmaxf(m, s);
    const float alpha = expf(m - m_new);  // exp(−inf) = 0 on the first key
    const float p = expf(s - m_new);
    l = alpha * l + p;
    const float4* v4 = reinterpret_cast<const float4*>(Vh + j * D);
    for (int c = 0; c < D / 4; ++c) {
      const float4 v = v4[c];
      acc[4 * c] = alpha * acc[4 * c] + p * v.x;
      acc[4 * c + 1] = alpha * acc[4 * c + 1] + p * v.y;
      acc[4 * c + 2] = alpha * acc[4 * c + 2] + p * v.z;
      acc[4 * c + 3] = acc[4 * c + 3] + p * v.w;
    }
    m = m_new;
    // end exercise 03-rescale
  }

  // exercise 03-finalise: write this row of O (acc / l) and its log-sum-exp
  const float inv_l = 1.0f / l;  // l >= 1: the max's own term is exp(0)
  for (int c = 0; c < D; ++c) O[r * D + c] = acc[c] * inv_l;
  if (lse) lse[r] = m + logf(l);
  // end exercise 03-finalise
}

namespace {

template <int D>
void launch(const AttentionProblem& p, const float* Q, const float* K, const float* V, float* O, float* lse) {
  const int64_t rows = p.rows();
  const int64_t blocks = (rows + THREADS - 1) / THREADS;
  streaming_attention_kernel<D><<<static_cast<unsigned>(blocks), THREADS, 0, fa::stream()>>>(
      Q, K, V, O, lse, rows, p.seq_q, p.seq_kv, p.scale, p.causal);
  FA_CHECK_LAUNCH("streaming_attention_kernel");
}

}  // namespace

void attention(const AttentionProblem& p, const float* Q, const float* K, const float* V, float* O, float* lse) {
  with_head_dim(p.dim, [&](auto D) { launch<decltype(D)::value>(p, Q, K, V, O, lse); });
}

}  // namespace fa::streaming
