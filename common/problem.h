/**
 * \file problem.h
 * \brief The attention problem every stage solves: its shape, scale and mask.
 *
 * O = softmax(scale · Q·Kᵀ [+ causal mask]) · V, batched over B·H heads.
 * Q is [B, H, Nq, d]; K and V are [B, H, Nkv, d]; O is [B, H, Nq, d].
 * Tensors are contiguous and row-major unless a fa::Layout says otherwise (stages 08 and
 * 11 take one), of the problem's element type (fp32 for stages 01-05; fp16 or bf16 from
 * stage 06 on). The log-sum-exp is always fp32.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/host_device.h"

namespace fa {

/// Head dimensions the project supports (every stage instantiates its kernels for these).
inline const std::vector<int64_t>& supported_head_dims() {
  static const std::vector<int64_t> dims = {16, 32, 64, 128};
  return dims;
}

/// One attention problem. Build it with make_problem(), which validates it.
struct AttentionProblem {
  int64_t batch = 1;   ///< B
  int64_t heads = 1;   ///< H
  int64_t seq_q = 1;   ///< Nq, query rows per head
  int64_t seq_kv = 1;  ///< Nkv, key/value rows per head
  int64_t dim = 64;    ///< d, head dimension
  float scale = 0.125f;  ///< multiplies Q·Kᵀ; 1/sqrt(d) unless chosen otherwise
  /// Causal mask, aligned top-left: query i sees keys j <= i (PyTorch's is_causal=True).
  bool causal = false;
  DType dtype = DType::F32;  ///< element type of Q, K, V and O

  int64_t batch_heads() const { return batch * heads; }           ///< B·H
  int64_t q_elems() const { return batch_heads() * seq_q * dim; }  ///< elements of Q (and O)
  int64_t kv_elems() const { return batch_heads() * seq_kv * dim; }  ///< elements of K (and V)
  int64_t rows() const { return batch_heads() * seq_q; }          ///< query rows over all heads
  /// Bytes of Q, K, V and O together: what any stage must read and write at least once.
  std::size_t qkvo_bytes() const {
    return static_cast<std::size_t>(2 * q_elems() + 2 * kv_elems()) * dtype_bytes(dtype);
  }
  /// 4·B·H·Nq·Nkv·d: two matmuls of 2·Nq·Nkv·d each (the causal mask is not subtracted).
  double flops() const {
    return 4.0 * static_cast<double>(batch_heads()) * static_cast<double>(seq_q) *
           static_cast<double>(seq_kv) * static_cast<double>(dim);
  }
};

/**
 * Builds and validates a problem. Every size must be at least 1, d must be one of
 * supported_head_dims(), and element counts must fit comfortably in 64-bit indices.
 * \param batch B; \param heads H; \param seq_q Nq; \param seq_kv Nkv; \param dim d.
 * \param scale a positive scale, or 0 for the default 1/sqrt(d).
 * \param causal whether to apply the (top-left) causal mask.
 * \param dtype the element type of Q, K, V and O.
 * \throws InputError with a message naming the bad value.
 */
AttentionProblem make_problem(int64_t batch, int64_t heads, int64_t seq_q, int64_t seq_kv,
                              int64_t dim, double scale = 0.0, bool causal = false,
                              DType dtype = DType::F32);

/**
 * HBM bytes of FlashAttention-2's loop order by the IO model: Q read and O written once,
 * K and V read once per Q tile of `br` rows, one fp32 log-sum-exp per row; elements of
 * p.dtype. Stages 05, 06 and 07 share it (at 4, 2 and 2 bytes an element).
 */
double q_outer_hbm_bytes(const AttentionProblem& p, int64_t br);

/**
 * Blocks in FlashAttention-2's grid, one per (Q tile of `br` rows, batch·head), flattened
 * into blockIdx.x as stages 05, 06 and 07 launch it.
 * \throws InputError naming `stage` if they exceed a grid's 2^31 − 1 blocks.
 */
unsigned q_tile_grid(const AttentionProblem& p, int64_t br, const std::string& stage);

/**
 * Where the elements of one [B, H, N, d] tensor lie: element (b, h, n, c) is
 * b·batch + h·head + n·row + c elements from the tensor's start. The last dimension is
 * always contiguous. A PyTorch view such as `qkv.view(B, N, 3, H, d).permute(2, 0, 3, 1, 4)[0]`
 * has row = 3·H·d and head = d: the kernels that take strides read it where it lies.
 */
struct Strides {
  int64_t batch = 0;  ///< elements from (b, h, n, c) to (b + 1, h, n, c)
  int64_t head = 0;   ///< elements from (b, h, n, c) to (b, h + 1, n, c)
  int64_t row = 0;    ///< elements from (b, h, n, c) to (b, h, n + 1, c)
  /// The strides of a contiguous [B, H, N, d] tensor with `heads` heads.
  static Strides contiguous(int64_t heads, int64_t n, int64_t d) { return {heads * n * d, n * d, d}; }
  /// Elements from the tensor's start to row 0 of head bh = b·H + h, with H = `heads`.
  FA_HOST_DEVICE int64_t head_offset(int64_t bh, int64_t heads) const { return bh / heads * batch + bh % heads * head; }
};

/// The strides of each tensor of one pass: Q, K, V and O, and dO for a backward pass.
struct Layout {
  Strides q;    ///< Q's strides, [B, H, Nq, d]
  Strides k;    ///< K's strides, [B, H, Nkv, d]
  Strides v;    ///< V's strides, [B, H, Nkv, d]
  Strides o;    ///< O's strides, [B, H, Nq, d]
  Strides d_o;  ///< dO's strides, [B, H, Nq, d] (a backward pass only)
  /// Every tensor contiguous [B, H, N, d], as AttentionProblem describes them.
  static Layout contiguous(const AttentionProblem& p) {
    const Strides q_like = Strides::contiguous(p.heads, p.seq_q, p.dim);
    const Strides kv_like = Strides::contiguous(p.heads, p.seq_kv, p.dim);
    return {q_like, kv_like, kv_like, q_like, q_like};
  }
};

/**
 * Refuses strides that the kernels' 16-byte copies cannot follow: each of them must be a
 * whole number of 16 bytes (of p.dtype's elements) and not negative.
 * \throws InputError naming `stage` and the tensor.
 */
void require_copyable(const AttentionProblem& p, const Layout& layout, const std::string& stage);

/// One line such as "B=4 H=32 Nq=4096 Nkv=4096 d=64 scale=0.125 causal=no dtype=fp32".
std::string describe(const AttentionProblem& p);

/// Bytes as a short human string, e.g. "8.00 GiB".
std::string format_bytes(double bytes);

}  // namespace fa
