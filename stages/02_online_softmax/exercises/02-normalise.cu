/**
 * \file online_softmax.cu
 * \brief Stage 02: row softmax with the online recurrence: m and l in one sweep.
 *
 * The idea: stage 01's softmax reads each row three times (max, then sum, then
 * normalise) because the sum needs the max first. The online recurrence (see
 * online_softmax.h) keeps a running max m and a running sum l and corrects l by
 * exp(m_old − m_new) whenever the max grows, so m and l come out of one sweep.
 *
 * What changed since stage 01's softmax_rows_kernel: sweeps 1 and 2 become one; the
 * block reduction combines (m, l) pairs with merge() instead of a max and then a sum.
 *
 * Cost per row of N floats: reads 2·N·4 bytes (stage 01: 3·N·4), writes N·4 bytes plus
 * m and l. Nothing else: no workspace.
 *
 * Run: `stage02_online_softmax` (both softmaxes side by side), `stage02_online_softmax --trace`
 */
#include "stages/02_online_softmax/online_softmax.h"

#include <algorithm>

#include "common/cuda_check.h"
#include "common/stream.h"

namespace fa::online {

constexpr int THREADS = 256;           ///< threads per row
constexpr int WARPS = THREADS / 32;    ///< warps per row

/// Merges every thread's (m, l) into the row's (m, l); every thread gets the result.
__device__ Stats block_merge(Stats s, Stats* scratch /* [WARPS] */) {
  // exercise 02-block-merge: merge every thread's (m, l) into the row's: within each warp by shuffles, then across warps
  //   stub: return s;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int offset = 16; offset > 0; offset /= 2) {  // within each warp, by shuffles
    const Stats other{__shfl_xor_sync(0xffffffffu, s.m, offset), __shfl_xor_sync(0xffffffffu, s.l, offset)};
    s = merge(s, other);
  }
  if (lane == 0) scratch[warp] = s;
  __syncthreads();
  s = scratch[0];  // across warps: every thread folds the few warp results
  for (int w = 1; w < WARPS; ++w) s = merge(s, scratch[w]);
  __syncthreads();  // scratch is reused by the next row
  return s;
  // end exercise 02-block-merge
}

/// One block per row (grid-stride over rows): sweep 1 finds m and l, sweep 2 writes p.
__global__ void online_softmax_kernel(const float* in, float* out, float* m_out, float* l_out,
                                      int64_t rows, int64_t cols) {
  __shared__ Stats scratch[WARPS];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* x = in + row * cols;
    float* p = out + row * cols;

    // Sweep 1: each thread folds its strided share of the row into its own (m, l),
    // tile by tile (one tile = one value per thread); then the block merges them.
    Stats s = empty_stats();
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) update(s, x[j]);
    s = block_merge(s, scratch);
    if (threadIdx.x == 0) {
      if (m_out) m_out[row] = s.m;
      if (l_out) l_out[row] = s.l;
    }

    // Sweep 2: normalise. An all −inf row has l = 0 and gets zeros, not NaN.
    // TODO(exercise 02-normalise): sweep 2: p[j] = exp(x[j] - m) / l over this thread's share of the row (zeros if l = 0)
  }
}

void softmax_rows(const float* in, float* out, float* m, float* l, int64_t rows, int64_t cols) {
  if (rows == 0 || cols == 0) return;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(rows, 2147483647));
  online_softmax_kernel<<<blocks, THREADS, 0, fa::stream()>>>(in, out, m, l, rows, cols);
  FA_CHECK_LAUNCH("online_softmax_kernel");
}

void softmax_rows_only(const float* in, float* out, int64_t rows, int64_t cols) {
  softmax_rows(in, out, nullptr, nullptr, rows, cols);
}

}  // namespace fa::online
