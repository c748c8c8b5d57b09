/**
 * \file naive_attention.cu
 * \brief Stage 01: naive attention in three kernels, with the N×N matrix in HBM.
 *
 * The idea: compute attention exactly as the formula reads,
 *
 *     S = scale · Q·Kᵀ          (kernel 1: tiled matmul, writes Nq×Nkv per head)
 *     P = softmax(S) per row    (kernel 2: max, sum, normalise; S is overwritten by P)
 *     O = P·V                   (kernel 3: tiled matmul, reads Nq×Nkv per head)
 *
 * Cost: B·H·Nq·Nkv floats of workspace (8 GiB at B=4, H=32, N=4096) and four trips of
 * that matrix through HBM (write S, read S, write P, read P), plus the softmax's
 * extra reads. Every later stage exists to remove this matrix.
 *
 * Run: `stage01_naive --batch 4 --heads 32 --seq-q 4096 --seq-kv 4096 --dim 64`
 */
#include "stages/01_naive/naive_attention.h"

#include <algorithm>
#include <cmath>

#include "common/cuda_check.h"
#include "common/stream.h"

namespace fa::naive {

// ---------------------------------------------------------------------------------------
// Kernels 1 and 3: one tiled matmul serves both steps.
//
// C[b] = alpha · A[b]·op(B[b]) for b in the batch of B·H heads, where A is M×K,
// op(B) is K×N and C is M×N, all row-major. For S = scale·Q·Kᵀ, B is K (Nkv×d) read
// transposed; for O = P·V, B is V (Nkv×d) read as it is.
//
// Each block computes a TILE×TILE tile of C. It walks along K in steps of TILE,
// staging a TILE×TILE piece of A and of op(B) in shared memory, so every element
// loaded from global memory is used TILE times instead of once.
// Threads: TILE × (TILE / ROWS_PER_THREAD); each thread owns ROWS_PER_THREAD outputs
// of one column, so one value of op(B) read from shared memory feeds several FMAs.
// ---------------------------------------------------------------------------------------
constexpr int TILE = 32;                             ///< rows and columns of a C tile, and the K step
constexpr int ROWS_PER_THREAD = 4;                   ///< outputs per thread, one column
constexpr int THREAD_ROWS = TILE / ROWS_PER_THREAD;  ///< blockDim.y

/// C[b] = alpha · A[b]·op(B[b]) for every b < batch, one TILE×TILE tile of C per block;
/// with `causal`, C(i, j) = −inf for j > i.
template <bool TransposeB>
__global__ void tiled_matmul_kernel(const float* A, const float* B, float* C, int64_t M,
                                    int64_t N, int64_t K, int64_t batch, float alpha,
                                    bool causal) {
  // +1 column of padding: threads of a warp reading down a column hit different banks.
  __shared__ float As[TILE][TILE + 1];
  __shared__ float Bs[TILE][TILE + 1];  // Bs[k][n] holds op(B)(k0 + k, col0 + n)

  const int tx = threadIdx.x;  // column within the tile, 0..TILE-1
  const int ty = threadIdx.y;  // first of this thread's rows, 0..THREAD_ROWS-1
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * TILE;
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * TILE;

  // gridDim.z is capped at 65535, so larger batches loop.
  for (int64_t b = blockIdx.z; b < batch; b += gridDim.z) {
    const float* Ab = A + b * M * K;
    const float* Bb = B + b * N * K;
    float* Cb = C + b * M * N;

    float acc[ROWS_PER_THREAD] = {};
    for (int64_t k0 = 0; k0 < K; k0 += TILE) {
      // Stage the tiles. Consecutive tx read consecutive addresses (coalesced).
      // exercise 01-tile-loads: stage the A tile and the op(B) tile in shared memory, zeros past the matrices' edges
      for (int r = ty; r < TILE; r += THREAD_ROWS) {
        const int64_t a_row = row0 + r, a_col = k0 + tx;
        As[r][tx] = (a_row < M && a_col < K) ? Ab[a_row * K + a_col] : 0.0f;
        if (TransposeB) {  // B is N×K: row (col0 + r) of B is column (col0 + r) of op(B)
          const int64_t b_row = col0 + r, b_col = k0 + tx;
          Bs[tx][r] = (b_row < N && b_col < K) ? Bb[b_row * K + b_col] : 0.0f;
        } else {           // B is K×N
          const int64_t b_row = k0 + r, b_col = col0 + tx;
          Bs[r][tx] = (b_row < K && b_col < N) ? Bb[b_row * N + b_col] : 0.0f;
        }
      }
      // end exercise 01-tile-loads
      __syncthreads();  // tiles complete before anyone reads them
      for (int kk = 0; kk < TILE; ++kk) {
        const float b_val = Bs[kk][tx];
        for (int i = 0; i < ROWS_PER_THREAD; ++i) acc[i] += As[ty + i * THREAD_ROWS][kk] * b_val;
      }
      __syncthreads();  // everyone done reading before the next tiles overwrite them
    }

    const int64_t col = col0 + tx;
    for (int i = 0; i < ROWS_PER_THREAD; ++i) {
      const int64_t row = row0 + ty + i * THREAD_ROWS;
      if (row < M && col < N) {
        // Causal (top-left): query row i sees key column j only if j <= i.
        Cb[row * N + col] = (causal && col > row) ? -INFINITY : alpha * acc[i];
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
// Kernel 2: row softmax, one block per row, three sweeps over the row in HBM:
//   sweep 1: m = max_j x_j      sweep 2: l = Σ_j exp(x_j − m)      sweep 3: p_j = exp(x_j − m) / l
// Subtracting m keeps every exponent <= 0, so exp() cannot overflow whatever the logits.
// ---------------------------------------------------------------------------------------
constexpr int SOFTMAX_THREADS = 256;        ///< threads per row
constexpr int WARPS = SOFTMAX_THREADS / 32;  ///< warps per row

/// Combines one value per thread into one value per block; every thread gets the result.
template <typename Op>
__device__ float block_reduce(float value, Op op, float* scratch /* [WARPS] */) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int offset = 16; offset > 0; offset /= 2) {  // within each warp, by shuffles
    value = op(value, __shfl_xor_sync(0xffffffffu, value, offset));
  }
  if (lane == 0) scratch[warp] = value;
  __syncthreads();
  value = scratch[0];  // across warps: every thread folds the few warp results
  for (int w = 1; w < WARPS; ++w) value = op(value, scratch[w]);
  __syncthreads();  // scratch is reused by the next reduction
  return value;
}

/// The maximum, for block_reduce.
struct MaxOp {
  /// max(a, b)
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
/// The sum, for block_reduce.
struct SumOp {
  /// a + b
  __device__ float operator()(float a, float b) const { return a + b; }
};

/// One block per row (grid-stride over rows): m, then l, then p = exp(x − m) / l.
__global__ void softmax_rows_kernel(const float* in, float* out, int64_t rows, int64_t cols) {
  __shared__ float scratch[WARPS];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* x = in + row * cols;
    float* p = out + row * cols;

    // TODO(exercise 01-softmax): the row's softmax in three sweeps: m, then l, then p = exp(x - m) / l (an all -inf row gets zeros)
  }
}

// ---------------------------------------------------------------------------------------
// Host side
// ---------------------------------------------------------------------------------------
namespace {

constexpr int64_t kMaxGridYZ = 65535;
constexpr int64_t kMaxGridX = 2147483647;

template <bool TransposeB>
void tiled_matmul(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K,
                  int64_t batch, float alpha, bool causal) {
  const int64_t tiles_m = (M + TILE - 1) / TILE;
  if (tiles_m > kMaxGridYZ) throw InputError("stage 01: sequence too long for one grid column");
  const dim3 block(TILE, THREAD_ROWS);
  const dim3 grid(static_cast<unsigned>((N + TILE - 1) / TILE), static_cast<unsigned>(tiles_m),
                  static_cast<unsigned>(std::min(batch, kMaxGridYZ)));
  tiled_matmul_kernel<TransposeB><<<grid, block, 0, fa::stream()>>>(A, B, C, M, N, K, batch, alpha, causal);
  FA_CHECK_LAUNCH("tiled_matmul_kernel");
}

}  // namespace

std::size_t workspace_bytes(const AttentionProblem& p) {
  return static_cast<std::size_t>(p.batch_heads() * p.seq_q * p.seq_kv) * sizeof(float);
}

void softmax_rows(const float* in, float* out, int64_t rows, int64_t cols) {
  if (rows == 0 || cols == 0) return;
  const unsigned blocks = static_cast<unsigned>(std::min(rows, kMaxGridX));
  softmax_rows_kernel<<<blocks, SOFTMAX_THREADS, 0, fa::stream()>>>(in, out, rows, cols);
  FA_CHECK_LAUNCH("softmax_rows_kernel");
}

void attention(const AttentionProblem& p, const float* Q, const float* K, const float* V,
               float* O, float* S, RowSoftmax softmax) {
  const int64_t bh = p.batch_heads();
  // 1. S = scale · Q·Kᵀ  (Nq×d times d×Nkv per head), masked if causal
  tiled_matmul</*TransposeB=*/true>(Q, K, S, p.seq_q, p.seq_kv, p.dim, bh, p.scale, p.causal);
  // 2. P = softmax(S), row by row, in place
  softmax(S, S, bh * p.seq_q, p.seq_kv);
  // 3. O = P·V  (Nq×Nkv times Nkv×d per head)
  tiled_matmul</*TransposeB=*/false>(S, V, O, p.seq_q, p.dim, p.seq_kv, bh, 1.0f, false);
}

}  // namespace fa::naive
