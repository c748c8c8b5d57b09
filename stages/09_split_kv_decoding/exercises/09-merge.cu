/**
 * \file split_kv_decoding.cu
 * \brief Stage 09: decoding. A few new queries against a long KV cache, the cache split
 *        across blocks, the partial results merged with stage 02's rule.
 *
 * The idea: in a decode step each sequence brings one new query (or a few) and attends to
 * its whole cache. Stage 05's grid has one block per (Q tile, head): with Nq = 1 that is
 * B·H blocks, each streaming a whole cache alone, 32 blocks for B=1 H=32, on a GPU of 132
 * multiprocessors. Here every sequence's cache is cut into chunks of one size (so a long
 * sequence gets more of them than a short one), the chunks run in parallel, and the
 * partial results are combined afterwards:
 *
 *     split kernel, one block per (KV head, row group, chunk s of sequence b):
 *         q ← the rows of every query head that reads this KV head (grouped-query attention)
 *         each warp streams its share of keys [s·chunk, min((s+1)·chunk, L_b)), 16 bytes a lane:
 *             S = q·Kᵀ of the keys just loaded; m_new = max(m, max S)
 *             l = l·e^(m − m_new) + Σ e^(S − m_new);  acc = acc·e^(m − m_new) + e^(S − m_new)·V
 *         the 4 warps' (m, l, acc) merged                      (stage 02's merge rule)
 *         one split:  O = acc / l, lse = m + log l
 *         several:    (m, l, acc) of split s → workspace
 *     merge kernel (several splits): the splits' (m, l, acc) merged  (the same rule)
 *         O = acc / l, lse = m + log l
 *
 * The merge rule is the one stage 02 proved for two parts of one row: with
 * m = max(m_a, m_b), l = l_a·e^(m_a − m) + l_b·e^(m_b − m), and the outputs add with the same
 * weights. It does not care where the parts came from: keys of one lane group, of one warp,
 * of one block. So this kernel applies it three times.
 *
 * What changed since stage 05 (the last CUDA-core stage):
 * - the grid is over (KV head, split), not over Q tiles: a decode step has almost no
 *   query rows, so the parallelism must come from the keys;
 * - a block serves every query head of its KV head (G = Hq/Hkv of them, and Nq queries
 *   each), so each cache row is read from HBM once, not G times;
 * - no shared-memory tiles: each lane loads 16 bytes of a key row straight into registers;
 * - two split kernels, chosen by the plan: on CUDA cores for one row (and in fp32), where a
 *   K or V value feeds one FMA and shuffles add the lanes' partial dot products; on tensor
 *   cores (stage 06's mma.sync) for fp16 and bf16 with several rows, where a value feeds
 *   G·Nq of them and CUDA cores would run out of issue slots first;
 * - each sequence has its own cache length, and the causal mask is aligned bottom-right;
 * - a second kernel merges the splits (skipped when there is one), launched early with
 *   programmatic dependent launch so that its launch hides behind the split kernel's end.
 * Cost: workspace of splits·B·Hq·Nq·(d + 2) floats (splits: the longest sequence's). HBM
 * traffic: K and V of the live cache once, plus Q, O and that workspace. It is
 * bandwidth-bound: the figure of merit is TB/s.
 *
 * The kernels and the plan are templates on their configuration (tuning.h): `Tuned` is the
 * finished one, and each variant there changes one step of LOG.md (`--variant NAME`).
 *
 * Run: `stage09_split_kv_decoding --batch 1 --heads 32 --seq-kv 32768 --dim 128`
 */
#include "stages/09_split_kv_decoding/split_kv_decoding.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <sstream>
#include <type_traits>

#include "common/cuda_check.h"
#include "common/errors.h"
#include "stages/09_split_kv_decoding/tuning.h"
#include "common/head_dim.h"
#include "common/trace.h"  // FA_TRACE: trace points for the See it run page, nothing elsewhere
#include "stages/02_online_softmax/online_softmax.h"
#include "stages/06_tensor_cores/mma.cuh"

namespace fa::decode {

using online::Stats;

/// What both kernels need to know about the problem and the plan.
struct Params {
  int batch;           ///< B
  int q_heads;         ///< Hq
  int kv_heads;        ///< Hkv
  int seq_q;           ///< Nq
  int max_seq_kv;      ///< Nmax: cache rows per KV head
  int rows;            ///< R = G·Nq: query rows that read one KV head
  int rows_per_block;  ///< of those, rows one block serves
  int row_groups;      ///< ⌈R / rows_per_block⌉
  int chunk;           ///< keys per split
  int splits;          ///< the most splits a sequence has (the longest's)
  int64_t total_rows;  ///< B·Hq·Nq
  float scale;         ///< multiplies Q·Kᵀ
  bool causal;         ///< bottom-right causal mask
};

// ---- 16-bit and 32-bit elements, 16 bytes at a time -----------------------------------

/// A 16-bit value of type T (its bits in the low half of `bits16`) as float.
template <typename T>
__device__ __forceinline__ float to_float(unsigned bits16);
/// \cond
template <>
__device__ __forceinline__ float to_float<__half>(unsigned bits16) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(bits16)));
}
template <>
__device__ __forceinline__ float to_float<__nv_bfloat16>(unsigned bits16) {
  return __bfloat162float(__ushort_as_bfloat16(static_cast<unsigned short>(bits16)));
}
/// \endcond

/// The 16 / sizeof(T) elements of one 16-byte load, widened to float.
template <typename T>
__device__ __forceinline__ void widen(const uint4& raw, float* x) {
  const unsigned w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (sizeof(T) == 4) {
      x[i] = __uint_as_float(w[i]);
    } else {
      x[2 * i] = to_float<T>(w[i] & 0xffffu), x[2 * i + 1] = to_float<T>(w[i] >> 16);
    }
  }
}

/// x rounded to T (to nearest, ties to even).
template <typename T>
__device__ __forceinline__ T from_float(float x);
/// \cond
template <>
__device__ __forceinline__ float from_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
/// \endcond

/// The weight e^(m_part − m) of a part with max m_part in a merge whose max is m; an empty
/// part (m_part = −inf) weighs 0, even when every part is empty.
__device__ __forceinline__ float weight(float m_part, float m) {
  return m_part == -INFINITY ? 0.0f : __expf(m_part - m);
}

/**
 * Stage 02's merge of `n` parts of one output element, used for the warps of a block and
 * for the splits of a row: part i has statistics stats[i·stats_stride] and partial output
 * acc[i·acc_stride]. Sets *total to the merged (m, l) and returns Σ acc_i·e^(m_i − m).
 */
__device__ __forceinline__ float merge_parts(int n, const Stats* stats, int64_t stats_stride, const float* acc,
                                             int64_t acc_stride, Stats* total) {
  // TODO(exercise 09-merge): merge n partial results, each (m, l) and an unnormalised O element, into the row's (m, l) and O element
  *total = stats[0];
  return acc[0];
}

/// The final row: O = acc / l and lse = m + log l.
template <typename T>
__device__ __forceinline__ void write_row(T* O, float* lse, int64_t row, int c, int D, float acc, Stats total) {
  O[row * D + c] = from_float<T>(acc / total.l);  // l >= 1: the max's own term is e^0
  if (lse && c == 0) lse[row] = total.m + logf(total.l);
}

/// Lets the merge kernel be launched now (programmatic dependent launch; see launch()): it
/// waits for this kernel's results by itself. A no-op without PDL and on the CPU backend.
template <bool PDL>
__device__ __forceinline__ void allow_merge_launch() {
#ifndef FA_CPU_KERNEL
  if constexpr (PDL) cudaTriggerProgrammaticLaunchCompletion();
#endif
}

/// What one split block works on: blockIdx.x = KV head (of one sequence) · row groups + row
/// group, blockIdx.y = a chunk of all sequences' keys (find_split). Its `rows` query rows
/// start at row r0 of the KV head's R; its keys are [begin, end) of sequence b's cache,
/// `len` rows long.
struct BlockWork {
  int kv_head;  ///< b·Hkv + hkv (the KV head among all sequences')
  int r0;       ///< the first of this block's rows, among the KV head's R
  int rows;     ///< rows this block serves (fewer in the last row group)
  int split;    ///< which of sequence b's splits
  int b;        ///< the sequence
  int len;      ///< its cache length
  int begin;    ///< this split's first key
  int end;      ///< one past its last key
};

/// Chunk `y` of all sequences' keys, numbered sequence after sequence (⌈L_b / chunk⌉ of
/// them for sequence b): its sequence b and which of b's splits it is. Each warp scans the
/// lengths 32 at a time: a prefix sum of the lanes' chunk counts, then the first lane whose
/// sequence ends past y. Every lane of the warp must call it; all get the same answer.
__device__ __forceinline__ void find_split(const int* kv_lens, int batch, int chunk, int y, int& b, int& split) {
  constexpr unsigned FULL = 0xffffffffu;
  const int lane = threadIdx.x % 32;
  int before = 0;  // chunks of the sequences already passed
  for (int base = 0; base < batch; base += 32) {
    const int n = base + lane < batch ? (kv_lens[base + lane] + chunk - 1) / chunk : 0;
    int upto = n;  // chunks of sequences base .. base + lane
    for (int o = 1; o < 32; o *= 2) {
      const int x = __shfl_up_sync(FULL, upto, o);
      if (lane >= o) upto += x;
    }
    const int passed = __popc(__ballot_sync(FULL, before + upto <= y));  // sequences ending at or before y
    const int first = __shfl_sync(FULL, upto - n, passed % 32);         // chunks before that lane's sequence
    if (passed < 32) {
      b = base + passed;
      split = y - before - first;
      return;
    }
    before += __shfl_sync(FULL, upto, 31);
  }
  b = -1, split = 0;  // past the last chunk: only if the lengths differ from the plan's
}

/// This block's BlockWork, for blocks of `rows_per_block` rows.
__device__ __forceinline__ BlockWork block_work(const int* kv_lens, const Params& prm, int rows_per_block) {
  BlockWork w;
  find_split(kv_lens, prm.batch, prm.chunk, static_cast<int>(blockIdx.y), w.b, w.split);
  if (w.b < 0) {  // no chunk: begin = len = 0
    w = BlockWork{0, 0, 0, 0, 0, 0, 0, 0};
    return w;
  }
  w.kv_head = w.b * prm.kv_heads + static_cast<int>(blockIdx.x) / prm.row_groups;
  w.r0 = blockIdx.x % prm.row_groups * rows_per_block;
  w.rows = min(rows_per_block, prm.rows - w.r0);
  w.len = kv_lens[w.b];
  w.begin = w.split * prm.chunk;
  w.end = min(w.begin + prm.chunk, w.len);
  return w;
}

/**
 * The end of a split block: the WARPS warps' partial results for its `rows` rows (from
 * row `row0` on), in shared memory as acc[warp][row][column] and stats[warp][row], merged
 * by stage 02's rule; then either the final rows (one split) or this split's part of the
 * workspace. Called by every thread of the block after a __syncthreads().
 */
template <typename T, int D, int ROWS>
__device__ __forceinline__ void merge_warps(const float* acc, const Stats* stats, int rows, int64_t row0, int split,
                                            const Params& prm, T* O, float* lse, float* part_acc,
                                            Stats* part_stats) {
  for (int idx = threadIdx.x; idx < rows * D; idx += THREADS) {
    const int r = idx / D, c = idx % D;
    Stats total;
    const float o = merge_parts(WARPS, stats + r, ROWS, acc + r * D + c, ROWS * D, &total);
    const int64_t row = row0 + r;
    FA_TRACE(keyed("part o", {blockIdx.y, row}, c, D, o));  // this split's (m, l, O), and each warp's (m, l)
    if (c == 0) FA_TRACE(keyed("part", {blockIdx.y, row}, 0, 2, total.m));
    if (c == 0) FA_TRACE(keyed("part", {blockIdx.y, row}, 1, 2, total.l));
    if (c < WARPS) FA_TRACE(keyed("warp m", {blockIdx.y, row}, c, WARPS, stats[c * ROWS + r].m));
    if (c < WARPS) FA_TRACE(keyed("warp l", {blockIdx.y, row}, c, WARPS, stats[c * ROWS + r].l));
    if (prm.splits == 1) {
      write_row<T>(O, lse, row, c, D, o, total);
    } else {
      const int64_t part = split * prm.total_rows + row;
      part_acc[part * D + c] = o;
      if (c == 0) part_stats[part] = total;
    }
  }
}

// ---- the split kernel on CUDA cores (one row, or fp32) -------------------------------

/// One block: the keys of split blockIdx.y of one KV head for up to ROWS of its query rows
/// (blockIdx.x = KV head · row groups + row group); see the file comment. S is the
/// configuration (tuning.h), Tuned for the finished kernel.
template <typename T, int D, int ROWS, class S>
__global__ void __launch_bounds__(THREADS, S::min_blocks)
    split_kernel(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V,
                 const int* __restrict__ kv_lens, Params prm, T* __restrict__ O, float* __restrict__ lse,
                 float* __restrict__ part_acc, Stats* __restrict__ part_stats) {
  constexpr int VEC = 16 / sizeof(T);     // elements in 16 bytes
  constexpr int LANES = D / VEC;          // lanes that share one key row, VEC values each
  constexpr int KEYS = 32 / LANES;        // key rows one warp-wide load covers
  constexpr int UNROLL = S::unroll;         // loads of K and of V in flight per lane
  constexpr int WARP_KEYS = KEYS * UNROLL;  // keys a warp takes per iteration
  constexpr unsigned FULL = 0xffffffffu;

  allow_merge_launch<S::pdl>();
  const auto [kv_head, r0, rows, split, b, len, begin, end] = block_work(kv_lens, prm, ROWS);
  if (begin >= len) return;  // no chunk (only if the device's lengths are not the plan's)
  // For See it run: which keys the block takes (warp w: WARP_KEYS of them from begin + w·WARP_KEYS on).
  FA_TRACE(block_values("split", {blockIdx.y}, b, split, begin, end, WARP_KEYS));

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int slot = lane / LANES;   // which of a load's KEYS key rows this lane reads
  const int piece = lane % LANES;  // which VEC values of that row

  // The R query rows that read this KV head are consecutive in Q: the G query heads
  // hkv·G .. hkv·G + G − 1 of sequence b, Nq rows each, start at row (b·Hq + hkv·G)·Nq = kv_head·R.
  const int64_t row0 = static_cast<int64_t>(kv_head) * prm.rows + r0;
  float q[ROWS][VEC];  // this lane's piece of each row, times the scale
  int limit[ROWS];     // keys j < limit[r] are visible to row r
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    limit[r] = 0;
    for (int e = 0; e < VEC; ++e) q[r][e] = 0.0f;
    if (r < rows) {
      widen<T>(*reinterpret_cast<const uint4*>(Q + (row0 + r) * D + piece * VEC), q[r]);
      for (int e = 0; e < VEC; ++e) q[r][e] *= prm.scale;
      const int i = (r0 + r) % prm.seq_q;  // which new query: the cache's position len − Nq + i
      limit[r] = prm.causal ? len - prm.seq_q + i + 1 : len;
    }
  }

  // Online softmax per row. m is the whole warp's (every lane holds the same value); l and
  // acc count only the keys of this lane's slot and are added across slots at the end.
  float m[ROWS], l[ROWS], acc[ROWS][VEC];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    m[r] = -INFINITY, l[r] = 0.0f;
    for (int e = 0; e < VEC; ++e) acc[r][e] = 0.0f;
  }

  const int64_t head = static_cast<int64_t>(kv_head) * prm.max_seq_kv * D + piece * VEC;
  const T* Kh = K + head;
  const T* Vh = V + head;
  for (int first = begin + warp * WARP_KEYS; first < end; first += WARPS * WARP_KEYS) {
    // Issue every load before using any: UNROLL rows of K and of V in flight per lane.
    uint4 k_raw[UNROLL], v_raw[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int j = first + u * KEYS + slot;
      k_raw[u] = v_raw[u] = make_uint4(0, 0, 0, 0);
      if (j < end) {  // never past the sequence: the cache's spare rows are not data
        k_raw[u] = *reinterpret_cast<const uint4*>(Kh + static_cast<int64_t>(j) * D);
        v_raw[u] = *reinterpret_cast<const uint4*>(Vh + static_cast<int64_t>(j) * D);
      }
    }
    // S = q·Kᵀ: each lane's VEC products, then a sum over the LANES lanes of the row.
    float s[UNROLL][ROWS];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      float k[VEC];
      widen<T>(k_raw[u], k);
      const int j = first + u * KEYS + slot;
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        if (r >= rows) continue;  // the same for the whole block
        float dot = 0.0f;
#pragma unroll
        for (int e = 0; e < VEC; ++e) dot += q[r][e] * k[e];
#pragma unroll
        for (int off = LANES / 2; off > 0; off /= 2) dot += __shfl_xor_sync(FULL, dot, off);
        s[u][r] = (j < end && j < limit[r]) ? dot : -INFINITY;
      }
    }
    float v[UNROLL][VEC];  // V widened once, used by every row
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) widen<T>(v_raw[u], v[u]);
    // The online softmax update, one row at a time, with the warp's max over these keys.
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      if (r >= rows) continue;
      float tile_max = s[0][r];
#pragma unroll
      for (int u = 1; u < UNROLL; ++u) tile_max = fmaxf(tile_max, s[u][r]);
#pragma unroll
      for (int off = LANES; off < 32; off *= 2) tile_max = fmaxf(tile_max, __shfl_xor_sync(FULL, tile_max, off));
      const float m_new = fmaxf(m[r], tile_max);
      if (m_new == -INFINITY) continue;  // nothing visible to this row yet (the same in every lane)
      const float alpha = __expf(m[r] - m_new);  // 0 when m was −inf
      m[r] = m_new;
      l[r] *= alpha;
#pragma unroll
      for (int e = 0; e < VEC; ++e) acc[r][e] *= alpha;
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const float p = __expf(s[u][r] - m_new);  // 0 for a masked key
        l[r] += p;
#pragma unroll
        for (int e = 0; e < VEC; ++e) acc[r][e] += p * v[u][e];
      }
    }
  }

  // The slots of a warp read different keys under the same m: their l and acc just add.
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
#pragma unroll
    for (int off = LANES; off < 32; off *= 2) {
      l[r] += __shfl_xor_sync(FULL, l[r], off);
#pragma unroll
      for (int e = 0; e < VEC; ++e) acc[r][e] += __shfl_xor_sync(FULL, acc[r][e], off);
    }
  }

  // The warps read different keys under different m: stage 02's merge.
  __shared__ float warp_acc[WARPS][ROWS][D];
  __shared__ Stats warp_stats[WARPS][ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    if (lane < LANES) {
      for (int e = 0; e < VEC; ++e) warp_acc[warp][r][piece * VEC + e] = acc[r][e];
    }
    if (lane == 0) warp_stats[warp][r] = Stats{m[r], l[r]};
  }
  __syncthreads();
  merge_warps<T, D, ROWS>(&warp_acc[0][0][0], &warp_stats[0][0], rows, row0, split, prm, O, lse, part_acc, part_stats);
}

// ---- the tensor-core split kernel (fp16 and bf16, several rows) ------------------------
//
// With G·Nq rows a K or V value feeds G·Nq multiply-adds, and on CUDA cores the kernel above
// runs out of issue slots before HBM runs out of bytes (the lesson shows the counters). So
// for fp16 and bf16 with more than one row the two products go to the tensor cores, as in
// stage 06: one m16n8k16 tile holds 16 query rows (the block's rows, padded with zeros),
// and each warp takes 16 keys a step. S = Q·Kᵀ is two 16×8 tiles, P stays in registers, and
// O += P·V adds to a 16×d accumulator.
//
// There is no shared-memory staging: each lane loads the pieces of K and V that its
// fragments need straight from HBM, 16 bytes at a time (fewer at d = 16 and 32). Two
// freedoms make that possible:
// - Q·Kᵀ sums over d, so d may be visited in any order, as long as Q and K use the same
//   one. Lane (g, t) holds, of each 16-wide k-step, the columns 2t, 2t+1, 2t+8, 2t+9 (four
//   16-bit values: b0, b1); here they are taken from 4 consecutive elements, so two
//   k-steps' worth are 8 consecutive elements of a key row: one 16-byte load.
// - O's columns may be numbered in any order, as long as the final write puts them back.
//   For P·V lane (g, t) needs column g of every 8-column n-tile of V; numbering them so that
//   those are consecutive elements of a V row makes them 16-byte loads too.
// V's B fragment pairs two keys in one register (keys 2t and 2t+1), which sit in different
// rows of V: each register is put together from two loads with a shift and a mask.

/// `WORDS` (1, 2 or 4) 32-bit words from `src`, or zeros when `ok` is false.
template <int WORDS>
__device__ __forceinline__ void load_words(const void* src, bool ok, uint32_t* w) {
  if constexpr (WORDS == 4) {
    const uint4 x = ok ? *static_cast<const uint4*>(src) : make_uint4(0, 0, 0, 0);
    w[0] = x.x, w[1] = x.y, w[2] = x.z, w[3] = x.w;
  } else if constexpr (WORDS == 2) {
    const uint2 x = ok ? *static_cast<const uint2*>(src) : make_uint2(0, 0);
    w[0] = x.x, w[1] = x.y;
  } else {
    w[0] = ok ? *static_cast<const uint32_t*>(src) : 0u;
  }
}

/// The 16-bit halves number `half` (0: low, 1: high) of `lo` and `hi`, in one register.
__device__ __forceinline__ uint32_t pair_halves(uint32_t lo, uint32_t hi, int half) {
  return half == 0 ? (lo & 0xffffu) | (hi << 16) : (lo >> 16) | (hi & 0xffff0000u);
}

/**
 * Where the elements of Q, K and V that a lane loads sit in a row of d.
 * - K (and Q): lane t of a quad reads D/4 elements of a row, in loads of KW words (2·KW
 *   elements). Load i starts at element i·8·KW + t·2·KW; its words are, in order, b0 and b1
 *   of k-step i·KW/2, then (when KW = 4) b0 and b1 of the next k-step.
 * - V: lane g reads D/8 elements of a row, in loads of VW words (2·VW elements). Element e
 *   of its run is column g of n-tile e, at e / (2·VW) · 16·VW + g·2·VW + e % (2·VW).
 */
template <int D>
struct MmaLayout {
  static constexpr int KW = D >= 32 ? 4 : 2;        ///< words per K load
  static constexpr int KLOADS = D / 8 / KW;         ///< K loads per key row and lane
  static constexpr int VW = D >= 64 ? 4 : D / 16;   ///< words per V load
  static constexpr int VLOADS = D / 16 / VW;        ///< V loads per key row and lane
  /// First element of K (or Q) load i of lane t.
  static __device__ __forceinline__ int k_at(int t, int i) { return i * 8 * KW + t * 2 * KW; }
  /// First element of V load i of lane g.
  static __device__ __forceinline__ int v_at(int g, int i) { return i * 16 * VW + g * 2 * VW; }
  /// The column of d that O's n-tile j, column c (0..7), stands for.
  static __device__ __forceinline__ int o_column(int j, int c) {
    return j / (2 * VW) * 16 * VW + c * 2 * VW + j % (2 * VW);
  }
};

/// One block: the keys of split blockIdx.y of one KV head for up to 16 of its query rows,
/// on tensor cores (T is __half or __nv_bfloat16); see the comment above.
template <typename T, int D, class S>
__global__ void __launch_bounds__(THREADS, S::mma_min_blocks)
    split_kernel_mma(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V,
                     const int* __restrict__ kv_lens, Params prm, T* __restrict__ O, float* __restrict__ lse,
                     float* __restrict__ part_acc, Stats* __restrict__ part_stats) {
  using L = MmaLayout<D>;
  constexpr int ROWS = MMA_ROWS;  // the rows of an m16n8k16 tile
  constexpr int STEP = 16;        // keys a warp takes per step: the k of P·V
  constexpr int KSTEPS = D / 16;  // k-steps of Q·Kᵀ
  constexpr int NTILES = D / 8;   // n-tiles of P·V
  constexpr unsigned FULL = 0xffffffffu;

  allow_merge_launch<S::pdl>();
  const auto [kv_head, r0, rows, split, b, len, begin, end] = block_work(kv_lens, prm, ROWS);
  if (begin >= len) return;  // no chunk (only if the device's lengths are not the plan's)

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int64_t row0 = static_cast<int64_t>(kv_head) * prm.rows + r0;

  // Q's A fragments, for rows g and g + 8 of the tile (h = 0, 1); rows past `rows` are zero.
  uint32_t qa[KSTEPS][4];
  int limit[2];  // keys j < limit[h] are visible to row g + 8h
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = g + 8 * h;
    limit[h] = end;  // this split's keys; the causal mask may end a row's keys sooner
    if (r < rows && prm.causal) limit[h] = min(end, len - prm.seq_q + (r0 + r) % prm.seq_q + 1);
#pragma unroll
    for (int i = 0; i < L::KLOADS; ++i) {
      uint32_t w[L::KW];
      load_words<L::KW>(Q + (row0 + r) * D + L::k_at(t, i), r < rows, w);
#pragma unroll
      for (int u = 0; u < L::KW; u += 2) {  // two words a k-step: columns 2t.. and 2t+8..
        const int ks = i * L::KW / 2 + u / 2;
        qa[ks][h] = w[u], qa[ks][2 + h] = w[u + 1];
      }
    }
  }

  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // rows g and g + 8 (l: this lane's keys)
  float acc[NTILES][4];
#pragma unroll
  for (int j = 0; j < NTILES; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;

  const int64_t head = static_cast<int64_t>(kv_head) * prm.max_seq_kv * D;
  const T* Kh = K + head;
  const T* Vh = V + head;
  for (int first = begin + warp * STEP; first < end; first += WARPS * STEP) {
    // K rows first + g (n-tile 0) and first + 8 + g (n-tile 1): this lane's columns of each.
    uint32_t kw[2][KSTEPS * 2];
#pragma unroll
    for (int n = 0; n < 2; ++n) {
      const int j = first + 8 * n + g;
#pragma unroll
      for (int i = 0; i < L::KLOADS; ++i) {
        load_words<L::KW>(Kh + static_cast<int64_t>(j) * D + L::k_at(t, i), j < end, &kw[n][i * L::KW]);
      }
    }
    // V rows first + 2t, 2t + 1, 2t + 8, 2t + 9: the keys of this lane's B registers.
    uint32_t vw[4][NTILES / 2];
#pragma unroll
    for (int v = 0; v < 4; ++v) {
      const int j = first + 2 * t + (v & 1) + 8 * (v >> 1);
#pragma unroll
      for (int i = 0; i < L::VLOADS; ++i) {
        load_words<L::VW>(Vh + static_cast<int64_t>(j) * D + L::v_at(g, i), j < end, &vw[v][i * L::VW]);
      }
    }

    // S = Q·Kᵀ for these 16 keys: s[n][0..1] row g, s[n][2..3] row g + 8, keys 8n + 2t, 8n + 2t + 1.
    float s[2][4];
#pragma unroll
    for (int n = 0; n < 2; ++n) {
      s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
      for (int ks = 0; ks < KSTEPS; ++ks) tc::mma_m16n8k16<T>(s[n], qa[ks], kw[n][2 * ks], kw[n][2 * ks + 1]);
    }
    // Scale and mask, then the online softmax of rows g and g + 8 (a row lives in a quad).
    float p[2][4];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float tile_max = -INFINITY;
#pragma unroll
      for (int n = 0; n < 2; ++n) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int j = first + 8 * n + 2 * t + e;
          float& x = s[n][2 * h + e];
          x = j < limit[h] ? x * prm.scale : -INFINITY;
          tile_max = fmaxf(tile_max, x);
        }
      }
      tile_max = fmaxf(tile_max, __shfl_xor_sync(FULL, tile_max, 1));
      tile_max = fmaxf(tile_max, __shfl_xor_sync(FULL, tile_max, 2));
      const float m_new = fmaxf(m[h], tile_max);
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // nothing visible yet: every p is 0
      const float alpha = __expf(m[h] - m_use);              // 0 when m was −inf
      m[h] = m_new;
      l[h] *= alpha;
#pragma unroll
      for (int n = 0; n < 2; ++n) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          p[n][2 * h + e] = __expf(s[n][2 * h + e] - m_use);
          l[h] += p[n][2 * h + e];
        }
      }
#pragma unroll
      for (int j = 0; j < NTILES; ++j) acc[j][2 * h] *= alpha, acc[j][2 * h + 1] *= alpha;
    }
    // O += P·V: the two S tiles, rounded to T, are P's A fragment (stage 06's reuse).
    uint32_t pa[4];
    tc::a_from_c<T>(pa, p[0], p[1]);
#pragma unroll
    for (int j = 0; j < NTILES; ++j) {
      const int w = j / 2, half = j % 2;  // n-tile j is element j of this lane's V run
      tc::mma_m16n8k16<T>(acc[j], pa, pair_halves(vw[0][w], vw[1][w], half), pair_halves(vw[2][w], vw[3][w], half));
    }
  }

  // The four lanes of a quad hold different keys of a row under the same m: their l adds.
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] += __shfl_xor_sync(FULL, l[h], 1);
    l[h] += __shfl_xor_sync(FULL, l[h], 2);
  }
  // The warps read different keys under different m: stage 02's merge, columns put back in order.
  __shared__ float warp_acc[WARPS][ROWS][D];
  __shared__ Stats warp_stats[WARPS][ROWS];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int j = 0; j < NTILES; ++j) {
#pragma unroll
      for (int e = 0; e < 2; ++e) warp_acc[warp][g + 8 * h][L::o_column(j, 2 * t + e)] = acc[j][2 * h + e];
    }
    if (t == 0) warp_stats[warp][g + 8 * h] = Stats{m[h], l[h]};
  }
  __syncthreads();
  merge_warps<T, D, ROWS>(&warp_acc[0][0][0], &warp_stats[0][0], rows, row0, split, prm, O, lse, part_acc, part_stats);
}

// ---- the merge kernel ------------------------------------------------------------------

/// One thread per output element: the splits of its row merged by stage 02's rule.
template <typename T, int D, bool PDL>
__global__ void merge_kernel(const float* __restrict__ part_acc, const Stats* __restrict__ part_stats,
                             const int* __restrict__ kv_lens, Params prm, T* __restrict__ O,
                             float* __restrict__ lse) {
#ifndef FA_CPU_KERNEL
  // Launched early (programmatic dependent launch, see launch()): wait here until the split
  // kernel has finished and its partial results are visible.
  if constexpr (PDL) cudaGridDependencySynchronize();
#endif
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= prm.total_rows * D) return;
  const int64_t row = idx / D;
  const int c = static_cast<int>(idx % D);
  const int b = static_cast<int>(row / (static_cast<int64_t>(prm.q_heads) * prm.seq_q));
  const int used = (kv_lens[b] + prm.chunk - 1) / prm.chunk;  // splits that reached this sequence
  Stats total;
  const float o = merge_parts(used, part_stats + row, prm.total_rows, part_acc + row * D + c, prm.total_rows * D, &total);
  if (c == 0) FA_TRACE(keyed("merged", {row}, 0, 2, total.m));  // the row's (m, l) over every split
  if (c == 0) FA_TRACE(keyed("merged", {row}, 1, 2, total.l));
  write_row<T>(O, lse, row, c, D, o, total);
}

// ---- host side -------------------------------------------------------------------------

namespace {

constexpr int MERGE_THREADS = 256;

Params make_params(const DecodeProblem& p, const Plan& plan) {
  Params prm;
  prm.batch = static_cast<int>(p.batch);
  prm.q_heads = static_cast<int>(p.q_heads);
  prm.kv_heads = static_cast<int>(p.kv_heads);
  prm.seq_q = static_cast<int>(p.seq_q);
  prm.max_seq_kv = static_cast<int>(p.max_seq_kv);
  prm.rows = static_cast<int>(p.group() * p.seq_q);
  prm.rows_per_block = plan.rows_per_block;
  prm.row_groups = static_cast<int>(plan.row_groups);
  prm.chunk = static_cast<int>(plan.chunk);
  prm.splits = static_cast<int>(plan.splits);
  prm.total_rows = p.rows();
  prm.scale = p.scale;
  prm.causal = p.causal;
  return prm;
}

// Launches `kernel` (a split kernel for T and D) on the plan's grid, then the merge kernel.
template <typename T, int D, class S, typename Kernel>
void launch(Kernel kernel, const DecodeProblem& p, const Plan& plan, const void* Q, const void* K, const void* V,
            const int* kv_lens, void* O, float* lse, void* workspace) {
  const Params prm = make_params(p, plan);
  float* part_acc = static_cast<float*>(workspace);  // [splits, B·Hq·Nq, d], then [splits, B·Hq·Nq] stats
  Stats* part_stats = workspace ? reinterpret_cast<Stats*>(part_acc + plan.splits * p.rows() * D) : nullptr;
  const dim3 grid(static_cast<unsigned>(plan.row_groups * p.kv_heads), static_cast<unsigned>(plan.chunks));
  kernel<<<grid, THREADS>>>(static_cast<const T*>(Q), static_cast<const T*>(K), static_cast<const T*>(V), kv_lens,
                            prm, static_cast<T*>(O), lse, part_acc, part_stats);
  FA_CHECK_LAUNCH("split_kernel");
  if (plan.splits == 1) return;
  const auto blocks = static_cast<unsigned>((p.rows() * D + MERGE_THREADS - 1) / MERGE_THREADS);
#ifndef FA_CPU_KERNEL
  if constexpr (S::pdl) {
    // Programmatic dependent launch (compute capability 9.0): the merge kernel may be
    // launched before the split kernel ends, so its launch overlaps the split kernel's last
    // blocks instead of following them; it waits for their results itself
    // (cudaGridDependencySynchronize). Older GPUs ignore the attribute.
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(blocks);
    config.blockDim = dim3(MERGE_THREADS);
    cudaLaunchAttribute early;
    early.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    early.val.programmaticStreamSerializationAllowed = 1;
    config.attrs = &early;
    config.numAttrs = 1;
    FA_CUDA_CHECK(cudaLaunchKernelEx(&config, merge_kernel<T, D, true>, part_acc,
                                     static_cast<const Stats*>(part_stats), kv_lens, prm, static_cast<T*>(O), lse));
    FA_CHECK_LAUNCH("merge_kernel");
    return;
  }
#endif
  // Without PDL, and on the CPU backend: after the split kernel, in stream order.
  merge_kernel<T, D, S::pdl><<<blocks, MERGE_THREADS>>>(part_acc, part_stats, kv_lens, prm, static_cast<T*>(O), lse);
  FA_CHECK_LAUNCH("merge_kernel");
}

// Each split's partial O (d floats a row) and its (m, l); nothing with one split.
std::size_t partial_bytes(const DecodeProblem& p, const Plan& plan) {
  if (plan.splits == 1) return 0;
  return static_cast<std::size_t>(plan.splits * p.rows()) * (static_cast<std::size_t>(p.dim) * sizeof(float) + sizeof(Stats));
}

// Calls f(T{}) for the element type of `dtype`.
template <typename F>
void with_type(DType dtype, F&& f) {
  switch (dtype) {
    case DType::F32: return f(float{});
    case DType::F16: return f(__half{});
    case DType::BF16: return f(__nv_bfloat16{});
  }
}

// Calls f(kernel) with the split kernel for T, D, S and rows_per_block (1, 4 or MMA_ROWS).
template <typename T, int D, class S, typename F>
void with_split_kernel(int rows_per_block, F&& f) {
  if (rows_per_block == 1) return f(split_kernel<T, D, 1, S>);
  if constexpr (!std::is_same<T, float>::value) {
    if (rows_per_block == MMA_ROWS) return f(split_kernel_mma<T, D, S>);
  }
  f(split_kernel<T, D, 4, S>);
}

// Calls f(T{}, std::integral_constant<int, D>{}) for p's element type and head dimension:
// every one for the finished kernels, fp16 at d = 64 and 128 (what LOG.md measures) for a
// variant of tuning.h.
template <class S, typename F>
void with_type_and_dim(const DecodeProblem& p, F&& f) {
  if constexpr (std::is_same<S, Tuned>::value) {
    with_head_dim(p.dim, [&](auto D) { with_type(p.dtype, [&](auto type) { f(type, D); }); });
  } else {
    if (p.dtype != DType::F16 || (p.dim != 64 && p.dim != 128)) {
      throw InputError(std::string("stage 09's variant ") + S::name + " runs fp16 at d = 64 and 128 only");
    }
    if (p.dim == 64) return f(__half{}, std::integral_constant<int, 64>{});
    f(__half{}, std::integral_constant<int, 128>{});
  }
}

// Blocks of the split kernel for p's type and head dimension that fit on one SM at once
// (registers are what limits them). The CPU backend runs one block at a time: there the
// answer is S::blocks_per_sm, so plans come out as they would on a GPU.
template <class S>
int resident_blocks_per_sm(const DecodeProblem& p, int rows_per_block) {
#ifdef FA_CPU_KERNEL
  (void)p, (void)rows_per_block;
  return S::blocks_per_sm;
#else
  int blocks = 1;
  with_type_and_dim<S>(p, [&](auto type, auto D) {
    with_split_kernel<decltype(type), decltype(D)::value, S>(rows_per_block, [&](auto kernel) {
      FA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, THREADS, 0));
    });
  });
  return std::max(blocks, 1);
#endif
}

// make_plan for configuration S.
template <class S>
Plan make_plan_as(const DecodeProblem& p, int sm_count, int64_t splits) {
  Plan plan;
  const int64_t rows = p.group() * p.seq_q;
  const bool tensor_cores = p.dtype != DType::F32 && rows >= S::mma_min_rows;
  plan.rows_per_block = tensor_cores ? MMA_ROWS : rows == 1 ? 1 : 4;
  plan.row_groups = (rows + plan.rows_per_block - 1) / plan.rows_per_block;
  const int64_t heads = p.kv_heads * plan.row_groups;  // blocks per chunk of one sequence's keys
  const int64_t longest = p.longest();
  // Every sequence's keys are cut into chunks of one size: sequence b has ⌈L_b / chunk⌉
  // splits, so in a ragged batch a long sequence gets more blocks than a short one.
  const auto chunks_of = [&](int64_t chunk) {
    int64_t n = 0;
    for (int64_t len : p.kv_lens) n += (len + chunk - 1) / chunk;
    return n;
  };
  if (splits == 0) {
    // One wave: as many blocks as fit on the GPU at once (at most S::blocks_per_sm an SM),
    // so the smallest chunk whose blocks fit in it. A second, partly filled wave would leave
    // most SMs idle at the end. The longest sequence gets at most L / MIN_CHUNK splits.
    const int64_t per_sm = std::min<int64_t>(S::blocks_per_sm, resident_blocks_per_sm<S>(p, plan.rows_per_block));
    const int64_t wave = per_sm * std::max(sm_count, 1);
    const int64_t most_splits = std::max(int64_t{1}, longest / MIN_CHUNK);
    int64_t lo = (longest + most_splits - 1) / most_splits;  // the smallest chunk allowed
    int64_t hi = longest;  // one split a sequence: taken if even that is more than a wave
    while (lo < hi) {      // chunks_of() only falls as the chunk grows
      const int64_t mid = lo + (hi - lo) / 2;
      if (heads * chunks_of(mid) <= wave) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    plan.chunk = hi;
  } else {
    splits = std::min(splits, longest);
    plan.chunk = (longest + splits - 1) / splits;
  }
  plan.splits = (longest + plan.chunk - 1) / plan.chunk;  // none left empty for the longest sequence
  plan.chunks = chunks_of(plan.chunk);
  if (heads > INT_MAX || plan.chunks > 65535 || p.rows() * p.dim > (int64_t{1} << 40) ||
      p.max_seq_kv > INT_MAX) {
    throw InputError("stage 09: the problem is too large for one grid (Hkv·row groups " + std::to_string(heads) +
                     ", chunks of all sequences " + std::to_string(plan.chunks) + ")");
  }
  return plan;
}

// attention for configuration S.
template <class S>
void attention_as(const DecodeProblem& p, const Plan& plan, const void* Q, const void* K, const void* V,
                  const int* kv_lens, void* O, float* lse, void* workspace) {
  with_type_and_dim<S>(p, [&](auto type, auto D) {
    using T = decltype(type);
    constexpr int d = decltype(D)::value;
    with_split_kernel<T, d, S>(plan.rows_per_block, [&](auto kernel) {
      launch<T, d, S>(kernel, p, plan, Q, K, V, kv_lens, O, lse, workspace);
    });
  });
}

}  // namespace

Plan make_plan(const DecodeProblem& p, int sm_count, int64_t splits) { return make_plan_as<Tuned>(p, sm_count, splits); }

std::size_t workspace_bytes(const DecodeProblem& p, const Plan& plan) { return partial_bytes(p, plan); }

double hbm_bytes_model(const DecodeProblem& p, const Plan& plan) {
  const double qo = 2.0 * static_cast<double>(p.q_elems()) * static_cast<double>(dtype_bytes(p.dtype));
  return p.kv_bytes() + qo + 2.0 * static_cast<double>(partial_bytes(p, plan));
}

std::string describe(const Plan& plan, const DecodeProblem& p) {
  std::ostringstream s;
  s << plan.rows_per_block << (plan.rows_per_block == 1 ? " row" : " rows") << " a block ("
    << (uses_tensor_cores(plan) ? "tensor cores" : "CUDA cores") << "), " << plan.row_groups
    << (plan.row_groups == 1 ? " group" : " groups") << " per KV head, ";
  if (plan.chunks == plan.splits * p.batch) {  // every sequence has the same number
    s << plan.splits << (plan.splits == 1 ? " split of " : " splits of ") << plan.chunk << " keys";
  } else {
    int64_t fewest = plan.splits;
    for (int64_t len : p.kv_lens) fewest = std::min(fewest, (len + plan.chunk - 1) / plan.chunk);
    s << "splits of " << plan.chunk << " keys, " << fewest << " to " << plan.splits << " a sequence ("
      << plan.chunks << " in all)";
  }
  s << ": " << plan.blocks() * p.kv_heads << " blocks of " << THREADS << " threads"
    << (plan.splits > 1 ? ", then a merge kernel" : "");
  return s.str();
}

void attention(const DecodeProblem& p, const Plan& plan, const void* Q, const void* K, const void* V,
               const int* kv_lens, void* O, float* lse, void* workspace) {
  attention_as<Tuned>(p, plan, Q, K, V, kv_lens, O, lse, workspace);
}


}  // namespace fa::decode
