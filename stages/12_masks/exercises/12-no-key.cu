/**
 * \file masked_attention.cu
 * \brief Stage 12: masks that skip work. Stage 08's kernel, given for each Q tile the list of
 *        K/V tiles it must visit, each marked full or partial: sliding windows, packed
 *        documents and block-sparse masks cost what they leave.
 *
 * The idea: a mask splits the grid of (Q tile, K/V tile) blocks into three kinds.
 *
 *     empty    every score hidden:   skipped (no copy, no product, no softmax)
 *     full     no score hidden:      computed as in the dense kernel, no test a score
 *     partial  some scores hidden:   computed, each score tested against its row's keys
 *
 * The host classifies the blocks once for a problem and a mask (Plan): each Q tile gets the
 * list of its K/V tiles that are not empty, in order, each with a bit saying partial. Every
 * mask here leaves each query row i one range of keys [first_i, last_i] (the causal mask,
 * the window and the row's document intersected), so a partial block's test is two
 * compares a score; a block mask drops whole tiles and needs no test at all.
 *
 *     producer:   for each K/V tile j in list(Q tile):   wait empty slot;  TMA K_j, V_j
 *                                                        (and the list entry, for the consumers)
 *     consumers:  as stage 08, over list(Q tile) instead of 0 .. n_tiles − 1; on a partial
 *                 block, S = −inf where the key is outside [first_i, last_i]; a row that
 *                 sees no key at all ends with l = 0 and writes O = 0, lse = −inf.
 *
 * What changed since stage 08: the K/V tiles a Q tile visits come from the plan's list, not
 * from 0 to the diagonal; the test of a score is the row's key range, only on partial
 * blocks; the softmax holds up when a row's max is still −inf; and Q tiles are ordered by
 * the work their lists hold, so that the blocks taking them finish together (one block a
 * multiprocessor: the host deals the tiles to the blocks by a model of each tile's time).
 * Cost: the plan's tables (two ints a query row, an int a visited block); HBM traffic: Q and
 * O once, K and V once per visited block.
 *
 * Run: `stage12_masks --window-left 256 --causal` (needs a Hopper GPU), or `stage12_masks_cpu
 * --docs 5` (the CPU backend's emulation, on any machine)
 */
#include "stages/12_masks/masked_attention.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "common/cuda_check.h"
#include "common/device_math.cuh"
#include "common/errors.h"
#include "common/head_dim.h"
#include "common/stream.h"
#include "stages/06_tensor_cores/mma.cuh"
#include "stages/08_hopper/hopper.cuh"
#include "stages/08_hopper/tuning.h"

namespace fa::masks {

using namespace hopper;  // the instructions (hopper.cuh) and the finished configuration (tuning.h)

constexpr int WG = 128;                  ///< threads of a warpgroup
constexpr int BOX = 64;                  ///< columns of one TMA box: 64 16-bit values, one 128-byte swizzle row
static_assert(BOX == 64, "hopper.cuh's tensor_map_4d reads boxes of 64 columns");
constexpr int PRODUCER_REGS = 24;        ///< registers a producer thread keeps (setmaxnreg)
constexpr float LOG2E = 1.4426950408889634f;  ///< scores are kept in base-2 units: s·scale·log2 e

/// The block's shape at head dim D under configuration S (tuning.h; the finished kernel is
/// Shape<D, Tuned>): C consumer warpgroups of 64 query rows each, and the registers each
/// consumer thread may take once the producer has given its own back (65,536 a
/// multiprocessor: 128 · (24 + C · regs) must fit, in steps of 8).
template <int D, class S>
struct Shape {
  static constexpr int STAGES = S::stages;                    ///< slots of the K/V ring
  static constexpr bool PINGPONG = S::overlap && S::pingpong;  ///< consumers take turns at their products
  static constexpr int C = D == 64 ? S::consumers_d64 : 2;    ///< consumer warpgroups
  static constexpr int BR = 64 * C;                           ///< query rows of a tile
  static constexpr int THREADS = WG * (1 + C);                ///< the producer warpgroup and the consumers
  static constexpr int CONSUMER_REGS = C == 2 ? 240 : 160;    ///< registers a consumer thread takes
  /// Q buffers: with 2, a block's tiles take them in turn, and the producer copies the next
  /// tile's Q while this one still runs (at d = 128 the K/V ring leaves no room for a second).
  static constexpr int QB = D == 64 ? S::q_buffers_d64 : 1;
  /// P buffers: with 2, tiles take them in turn, and P_{j+1} is written while P_j·V_j still
  /// reads P_j (at d = 128 there are not the registers for a second).
  static constexpr int PB = D == 64 ? S::p_buffers_d64 : 1;
  /// Lazy rescaling: see softmax in the kernel. It pays at d = 128 (LOG.md).
  static constexpr bool LAZY = S::lazy == Lazy::always || (S::lazy == Lazy::at_d128 && D == 128);
  /// O staged in shared memory at d = 64: each consumer warp writes its 16 rows of O / l there,
  /// then copies them out 16 bytes a thread (LOG.md, "O staged by each warp"). At d = 128 the
  /// K/V ring leaves no room.
  static constexpr bool O_STAGED = D == 64;
  /// Bytes from one row of a staged O to the next: 16 more than the row, so that the eight
  /// rows a warp writes at once fall on different banks.
  static constexpr int O_ROW = 2 * D + 16;
};

/// The lazy rescale's slack, in base-2 units: with lazy rescaling a row's max moves only
/// when a score passes it by more than this, so P ≤ 2^8, which fp16 and bf16 hold.
constexpr float RESCALE_SLACK = 8.0f;

/// How many of a thread's Bc/4 keys in a row lie before key x (x counted from the thread's
/// first): key k is 8·(k/2) + k%2, so 2 for each whole 8 below x and up to 2 of the next 8.
/// No branch: x is clamped to 0 .. Bc first.
__host__ __device__ constexpr int keys_before(int x) {
  static_assert(Bc / 4 <= 32, "a row's keys must fit one 32-bit mask");
  const int y = x < 0 ? 0 : x > Bc ? Bc : x;
  return 2 * (y / 8) + (y % 8 < 2 ? y % 8 : 2);
}

/// The thread's keys in a row from `first` to `end` − 1 (counted from its first key), as a
/// mask of k: bits keys_before(first) .. keys_before(end) − 1 (none where end ≤ first).
__host__ __device__ constexpr uint32_t kept_run(int first, int end) {
  const auto below = [](int k) { return k >= 32 ? ~0u : (1u << k) - 1u; };  // bits 0 .. k − 1
  return below(keys_before(end)) & ~below(keys_before(first));
}

/// Where everything lives in the block's shared memory (byte offsets, 1024-aligned: the
/// 128-byte swizzle repeats every 1024 bytes and the tensor cores expect it aligned).
/// A tile of R rows × D columns is stored as D/64 boxes of R rows × 128 bytes.
template <int D, class S>
struct Smem {
  static constexpr int STAGES = Shape<D, S>::STAGES;   ///< slots of the K/V ring
  static constexpr int QB = Shape<D, S>::QB;            ///< Q buffers
  static constexpr int Q_BYTES = Shape<D, S>::BR * D * 2;  ///< one Q tile
  static constexpr int KV_BYTES = Bc * D * 2;           ///< one K (or V) tile
  static constexpr int q = 0;                           ///< QB Q tiles
  static constexpr int k = q + QB * Q_BYTES;            ///< STAGES K tiles
  static constexpr int v = k + STAGES * KV_BYTES;       ///< STAGES V tiles
  static constexpr int bars = v + STAGES * KV_BYTES;    ///< q_full[QB], q_empty[QB], k_full[S], v_full[S], empty[S]
  static constexpr int tile = bars + (2 * QB + 3 * STAGES) * 8;  ///< each Q buffer's tile: 4 ints (the producer's)
  static constexpr int entry = tile + 16 * QB;          ///< each ring slot's list entry (an int)
  static constexpr int o = (entry + 4 * STAGES + 15) / 16 * 16;  ///< the staged O tile (O_STAGED), 16-aligned
  static constexpr int O_BYTES = Shape<D, S>::O_STAGED ? Shape<D, S>::BR * Shape<D, S>::O_ROW : 0;  ///< its bytes
  static constexpr int bytes = o + O_BYTES + 1024;      ///< + slack to align the base
};

/// Which Q tiles there are, and which block takes which: tile number t → (Q tile, batch·head).
/// A Q tile's work is the length of its list, which the mask makes uneven (under the causal
/// mask it grows with the tile's index; with documents it follows their lengths).
/// With one block a multiprocessor (`schedule` given), block b takes the tiles the plan's
/// schedule lists for it, numbers schedule[b] .. schedule[b + 1] − 1, in order: dealt on the
/// host, head by head, each to the block its model of the work says is free first, and the
/// last ones heaviest first, so that the blocks finish together (Plan::schedule). Without
/// it, a block for each tile, each head's heaviest first (`rank`).
struct TileOrder {
  int q_tiles;          ///< Q tiles of one head
  int h;                ///< H, heads a batch: head bh is head bh % h of batch bh / h
  const int* rank;      ///< [q_tiles]: the Q tiles, heaviest first (device memory)
  const int* schedule;  ///< persistent: [gridDim.x + 1] offsets, then bh · q_tiles + Q tile; else null
  /// The first number block b takes, and one past its last.
  __device__ int first(int b) const { return schedule ? schedule[b] : b; }
  __device__ int end(int b) const { return schedule ? schedule[b + 1] : b + 1; }  ///< \copydoc first
  /// The Q tile and head of number t.
  __device__ void coords(int t, int& qt, int& bh) const {
    const int code = schedule ? schedule[gridDim.x + 1 + t] : t / q_tiles * q_tiles + rank[t % q_tiles];
    bh = code / q_tiles;
    qt = code % q_tiles;
  }
};

/// The plan's tables as the kernel reads them (device memory).
struct Tables {
  const int* keys;     ///< [Nq][2]: the first and last key each query row sees
  const int* list_at;  ///< [q_tiles + 1]: Q tile qt's list is list[list_at[qt] .. list_at[qt + 1])
  const int* list;     ///< entries 2·j + partial: K/V tile j, partial or full
};

/**
 * The producer warpgroup and C consumers (see the file's comment). With `order.schedule`,
 * the grid has one block a multiprocessor, and block b takes the tiles the schedule lists
 * for it, one after another: the producer copies the next tile's Q and K/V while the
 * consumers still finish and write the last one. Without it, a block for each tile. Each
 * Q tile visits the K/V tiles of its list in `tables`, and a partial one is masked score by
 * score. The tensor maps describe Q, K and V as [B][H][N][D], each with its own strides;
 * O is written through `o_strides`.
 */
template <typename T, int D, class S>
__global__ void __launch_bounds__(Shape<D, S>::THREADS, 1)
    masked_kernel(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tk,
                  const __grid_constant__ CUtensorMap tv, T* O, Strides o_strides, float* lse, int seq_q,
                  float scale_log2, TileOrder order, Tables tables) {
  using L = Smem<D, S>;
  using Sh = Shape<D, S>;
  constexpr int C = Sh::C, BR = Sh::BR, STAGES = Sh::STAGES;
  constexpr bool PINGPONG = Sh::PINGPONG;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  constexpr int QB = L::QB;
  uint64_t* q_full = reinterpret_cast<uint64_t*>(smem + L::bars);  // [QB]
  uint64_t* q_empty = q_full + QB;                                  // [QB]
  uint64_t* k_full = q_empty + QB;
  uint64_t* v_full = k_full + STAGES;
  uint64_t* empty = v_full + STAGES;
  // [QB][4]: the Q tile (−1: no more), its list's length, its batch and its head, as the producer
  // found them (the consumers then wait on no load from global memory, and do no division, for
  // a tile)
  volatile int* tile_info = reinterpret_cast<volatile int*>(smem + L::tile);
  volatile int* slot_entry = reinterpret_cast<volatile int*>(smem + L::entry);  // [STAGES]: the tile in each slot

  if (threadIdx.x == 0) {
    for (int b = 0; b < QB; ++b) {
      mbarrier_init(&q_full[b], 1);
      mbarrier_init(&q_empty[b], C * WG);  // every consumer thread arrives
    }
    for (int s = 0; s < STAGES; ++s) {
      mbarrier_init(&k_full[s], 1);
      mbarrier_init(&v_full[s], 1);
      mbarrier_init(&empty[s], C * WG);
    }
    mbarrier_init_fence();
  }
  __syncthreads();

  const int wg = threadIdx.x / WG;
  if (wg == 0) {  // ---------------- the producer ----------------
    setmaxnreg_dec<PRODUCER_REGS>();
    if (threadIdx.x == 0) {
      int it = 0;  // K/V tiles copied so far: ring slot it % STAGES, round it / STAGES
      const int t_end = order.end(blockIdx.x);
      for (int n = 0, t = order.first(blockIdx.x);; ++n, ++t) {
        // Tile n takes Q buffer n % QB, in its round n / QB.
        const int b = n % QB, q_round = n / QB;
        mbarrier_wait(&q_empty[b], (q_round & 1) ^ 1);  // the consumers are done with this buffer (round 0: free)
        if (t >= t_end) {                               // no more tiles: tell the consumers
          tile_info[4 * b] = -1;
          mbarrier_arrive(&q_full[b]);
          break;
        }
        int qt = 0, bh = 0;
        order.coords(t, qt, bh);
        const int* list = tables.list + tables.list_at[qt];
        const int n_tiles = tables.list_at[qt + 1] - tables.list_at[qt];
        tile_info[4 * b] = qt;  // published by the arrive below
        tile_info[4 * b + 1] = n_tiles;
        tile_info[4 * b + 2] = bh / order.h;
        tile_info[4 * b + 3] = bh % order.h;
        if (n_tiles == 0) {  // every block of the Q tile is empty: no Q to copy
          mbarrier_arrive(&q_full[b]);
        } else {
          mbarrier_arrive_expect_tx(&q_full[b], L::Q_BYTES);
          for (int c = 0; c < D / BOX; ++c) {
            tma_load_4d(smem + L::q + b * L::Q_BYTES + c * BR * 128, &tq, &q_full[b], c * BOX, qt * BR, bh % order.h,
                        bh / order.h);
          }
        }
        for (int u = 0; u < n_tiles; ++u, ++it) {
          const int entry = list[u], j = entry >> 1;  // the list's u-th K/V tile: tile j
          const int s = it % STAGES, round = it / STAGES;
          mbarrier_wait(&empty[s], (round & 1) ^ 1);  // the consumers are done with this slot (round 0: free)
          slot_entry[s] = entry;  // published by the arrive below
          mbarrier_arrive_expect_tx(&k_full[s], L::KV_BYTES);
          for (int c = 0; c < D / BOX; ++c)
            tma_load_4d(smem + L::k + s * L::KV_BYTES + c * Bc * 128, &tk, &k_full[s], c * BOX, j * Bc, bh % order.h,
                        bh / order.h);
          mbarrier_arrive_expect_tx(&v_full[s], L::KV_BYTES);
          for (int c = 0; c < D / BOX; ++c)
            tma_load_4d(smem + L::v + s * L::KV_BYTES + c * Bc * 128, &tv, &v_full[s], c * BOX, j * Bc, bh % order.h,
                        bh / order.h);
        }
      }
    }
  } else {
    // ---------------- the consumers: warpgroup 1 + w has rows 64w .. 64w + 63 of the tile ----------------
    setmaxnreg_inc<Sh::CONSUMER_REGS>();
    const int cw = wg - 1;
    const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;

    float o[D / 2];  // O: 64 × D per warpgroup, the wgmma accumulator layout
    float m[2], l[2];  // l: this thread's part of the row sum
    float s[Bc / 2];  // S: 64 × Bc per warpgroup
    uint32_t p[Sh::PB][Bc / 16][4];  // P (16-bit pairs): the A operand of P·V
    int it = 0;  // ring position of the tile's first K/V tile
    int i0 = 0, row0 = 0;  // the Q tile's first row; this thread's rows: row0 and row0 + 8
    int qb = 0;  // the Q buffer of the tile
    int keys_first[2], keys_last[2];  // the keys this thread's two rows see
    int entry = 0;  // the list entry of the last K tile issued: 2·j + partial

    // S = Q_i·K_jᵀ: D/16 products of 64×16 by 16×Bc, issued (not waited for).
    const auto issue_s = [&](int j) {
      const int slot = (it + j) % STAGES;
      const uint8_t* Ks = smem + L::k + slot * L::KV_BYTES;
      mbarrier_wait(&k_full[slot], ((it + j) / STAGES) & 1);
      entry = slot_entry[slot];
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        const int box = kk / 4, along = (kk % 4) * 32;  // 16 columns are 32 bytes along a 128-byte row
        const uint64_t a = smem_desc(smem + L::q + qb * L::Q_BYTES + box * BR * 128 + cw * 64 * 128 + along, 16, 1024);
        const uint64_t b = smem_desc(Ks + box * Bc * 128 + along, 16, 1024);
        wgmma_ss<T, Bc>(s, a, b, kk > 0);
      }
      wgmma_commit();
    };

    // O += P·V_j: Bc/16 products of 64×16 (P, registers) by 16×D (V, MN-major), issued.
    const auto issue_pv = [&](int j, const uint32_t(&pj)[Bc / 16][4]) {
      const int slot = (it + j) % STAGES;
      const uint8_t* Vs = smem + L::v + slot * L::KV_BYTES;
      mbarrier_wait(&v_full[slot], ((it + j) / STAGES) & 1);
      fence_registers(o);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < Bc / 16; ++kk) {
        const uint64_t b = smem_desc(Vs + kk * 16 * 128, Bc * 128, 1024);
        wgmma_rs<T, D>(o, pj[kk], b, true);
      }
      wgmma_commit();
    };
    const auto release = [&](int j) { mbarrier_arrive(&empty[(it + j) % STAGES]); };

    // A row's max or sum over this thread's part of it: as a tree, in log2(Bc/4) dependent
    // steps (variant serial_reduce: one value after the other, Bc/4 steps).
    const auto reduce = [&](int r, auto op) {
      if constexpr (S::tree_reduce) {
        return dev::row_reduce(s, r, op);
      } else {
        float x = op(s[2 * r], s[2 * r + 1]);
#pragma unroll
        for (int n = 1; n < Bc / 8; ++n) x = op(op(x, s[4 * n + 2 * r]), s[4 * n + 2 * r + 1]);
        return x;
      }
    };

    // The online softmax of the last K tile issued (`entry`) on this thread's two rows (each
    // row lives in one quad of lanes), in S's registers: S becomes 2^(S·scale·log2 e − m_new);
    // m and l move on, and alpha is returned, by which O is still to be rescaled. With lazy
    // rescaling (Shape::LAZY, as in stage 07) m moves only when the tile's max passes it by
    // more than RESCALE_SLACK: P may then exceed 1, up to 2^8, but O and l share the same m
    // and O / l is unchanged; a warp none of whose rows moved skips O's rescale. Returns
    // whether either of this thread's rows moved.
    const auto softmax = [&](float(&alpha)[2]) {
      // exercise 12-partial: on a partial block (entry's low bit), hide each score of S whose key lies outside its row's range [keys_first[r], keys_last[r]] (S = −inf); a full block has none to hide
      //   stub: (void)keys_first, (void)keys_last;
      // One test a tile: a full block has no hidden score. On a partial one, a score is kept
      // if its key is in its row's range (which stops at Nkv − 1: the end is masked too).
      // This thread's keys in a row are k = 0 .. Bc/4 − 1, key 8·(k/2) + k%2 past the tile's
      // first + 2t: they rise with k, so the kept ones are a run of k, lo ≤ k < hi, found once
      // a row. Each score then costs one bit test, where two comparisons of its key would
      // take more instructions (LOG.md, "A partial block's run of kept keys").
      if (entry & 1) {
        const int base = (entry >> 1) * Bc + 2 * t;  // the key of k = 0
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const uint32_t kept = kept_run(keys_first[r] - base, keys_last[r] + 1 - base);
#pragma unroll
          for (int n = 0; n < Bc / 8; ++n) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              if (!(kept & (1u << (2 * n + e)))) s[4 * n + 2 * r + e] = -INFINITY;
            }
          }
        }
      }
      // end exercise 12-partial
      bool moved = false;  // has either row's max moved?
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float mx = tc::quad_max(reduce(r, [](float a, float b) { return fmaxf(a, b); })) * scale_log2;
        const float m_new = Sh::LAZY ? (mx > m[r] + RESCALE_SLACK ? mx : m[r]) : fmaxf(m[r], mx);
        // TODO(exercise 12-no-key): m_sub, what this row's scores are shifted by (its max, where it has one), and alpha[r], the rescale of O and l from m[r] to it, such that a row that has seen no key yet (m_new = −inf) gets P = 0 and alpha = 0, never NaN
        const float m_sub = m_new;
        alpha[r] = dev::fast_exp2<true>(m[r] - m_sub);
        moved |= m_new != m[r];
#pragma unroll
        for (int n = 0; n < Bc / 8; ++n) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            float& x = s[4 * n + 2 * r + e];
            x = dev::fast_exp2<true>(fmaf(x, scale_log2, -m_sub));
          }
        }
        l[r] = alpha[r] * l[r] + reduce(r, [](float a, float b) { return a + b; });
        m[r] = m_new;
      }
      return moved;
    };

    // P, rounded to T, as the A operand of P·V: two 8-column pieces of S are one A fragment.
    const auto make_p = [&](uint32_t(&pj)[Bc / 16][4]) {
#pragma unroll
      for (int kk = 0; kk < Bc / 16; ++kk) {
        pj[kk][0] = tc::pack2<T>(s[8 * kk + 0], s[8 * kk + 1]);
        pj[kk][1] = tc::pack2<T>(s[8 * kk + 2], s[8 * kk + 3]);
        pj[kk][2] = tc::pack2<T>(s[8 * kk + 4], s[8 * kk + 5]);
        pj[kk][3] = tc::pack2<T>(s[8 * kk + 6], s[8 * kk + 7]);
      }
    };

    const auto rescale_o = [&](const float(&alpha)[2]) {
#pragma unroll
      for (int n = 0; n < D / 8; ++n) {
        o[4 * n] *= alpha[0];
        o[4 * n + 1] *= alpha[0];
        o[4 * n + 2] *= alpha[1];
        o[4 * n + 3] *= alpha[1];
      }
    };

    // With PINGPONG the consumers take turns to issue their products, in a ring: each
    // waits at its own hardware barrier (1 + cw) and then lets the next one go.
    const auto my_turn = [&] {
      if (PINGPONG) named_barrier_sync(1 + cw, 2 * WG);
    };
    const auto next_turn = [&] {
      if (PINGPONG) named_barrier_arrive(1 + (cw + 1) % C, 2 * WG);
    };

    // One K/V tile that has a next one: P_j (made already, in pj) times V_j, and S_{j+1}
    // made into P_{j+1} (in pn). S_{j+1} is issued before P_j·V_j and its softmax runs while
    // the tensor cores still multiply P_j·V_j (variant no_overlap: each product waited for
    // at once); O is rescaled once that product is done (it adds into O), and so is P_{j+1}
    // written, unless it has a buffer of its own (Shape::PB = 2: pn is not pj).
    const auto tile = [&](int j, const uint32_t(&pj)[Bc / 16][4], uint32_t(&pn)[Bc / 16][4]) {
      my_turn();
      if constexpr (S::overlap) issue_s(j + 1);
      issue_pv(j, pj);
      next_turn();
      if constexpr (!S::overlap) {
        wgmma_wait<0>();
        release(j);
        issue_s(j + 1);
      }
      wgmma_wait<S::overlap ? 1 : 0>();  // S_{j+1} is done; P_j·V_j may still run
      fence_registers(s);
      float alpha[2];
      const bool moved = softmax(alpha);
      if constexpr (Sh::PB == 2) make_p(pn);
      wgmma_wait<0>();
      fence_registers(o);
      if constexpr (S::overlap) release(j);  // this thread is done with the slot's K and V
      if constexpr (Sh::PB == 1) make_p(pn);
      if (!Sh::LAZY || __any_sync(0xffffffffu, moved)) rescale_o(alpha);
    };
    // The last tile: P·V only. Every S product of the Q tile is done, so the Q buffer is
    // handed back first: the producer may copy the next tile's Q while this one finishes.
    const auto last_tile = [&](int j, const uint32_t(&pj)[Bc / 16][4]) {
      mbarrier_arrive(&q_empty[qb]);
      my_turn();
      issue_pv(j, pj);
      next_turn();
      wgmma_wait<0>();
      fence_registers(o);
      release(j);
    };

    if (PINGPONG && cw == C - 1) named_barrier_arrive(1, 2 * WG);  // consumer 0 takes the first turn
    for (int n = 0;; ++n) {
      qb = n % QB;
      mbarrier_wait(&q_full[qb], (n / QB) & 1);
      const int qt = tile_info[4 * qb];
      if (qt < 0) break;
      const int n_tiles = tile_info[4 * qb + 1], batch = tile_info[4 * qb + 2], head = tile_info[4 * qb + 3];
      i0 = qt * BR;
      row0 = i0 + 64 * cw + 16 * warp + g;
      for (int i = 0; i < D / 2; ++i) o[i] = 0.0f;
      m[0] = m[1] = -INFINITY;
      l[0] = l[1] = 0.0f;
      for (int r = 0; r < 2; ++r) {  // a row past Nq sees nothing (and is not written)
        const int row = row0 + 8 * r;
        keys_first[r] = row < seq_q ? tables.keys[2 * static_cast<int64_t>(row)] : 0;
        keys_last[r] = row < seq_q ? tables.keys[2 * static_cast<int64_t>(row) + 1] : -1;
      }

      if (n_tiles == 0) {
        mbarrier_arrive(&q_empty[qb]);  // no product reads Q: O = 0 and lse = −inf below
      } else {
        issue_s(0);
        wgmma_wait<0>();
        fence_registers(s);
        float alpha[2];  // O is still 0: nothing to rescale
        softmax(alpha);
        make_p(p[0]);
        if constexpr (Sh::PB == 1) {
          for (int j = 0; j + 1 < n_tiles; ++j) tile(j, p[0], p[0]);
          last_tile(n_tiles - 1, p[0]);
        } else {
          // P_j lives in p[j % 2]: the loop takes two tiles a step, so that each names its
          // buffers at compile time (registers cannot be indexed at run time).
          int j = 0;
          for (; j + 2 < n_tiles; j += 2) {
            tile(j, p[0], p[1]);
            tile(j + 1, p[1], p[0]);
          }
          if (j + 1 < n_tiles) {
            tile(j, p[0], p[1]);
            last_tile(j + 1, p[1]);
          } else {
            last_tile(j, p[0]);
          }
        }
      }
      it += n_tiles;

      // O / l, once, and the log-sum-exp. At d = 128, as stage 08 writes them (16 bytes a store
      // where O is 16-byte aligned, else two neighbouring values a time). A row that saw
      // no key has l = 0: O = 0 and lse = −inf. Each Q tile ends here, both consumers at once,
      // so the chain is kept short: the head's offset from the producer's batch and head (no
      // division), 1 / l and log2 l by the special function unit's approximations (1 ulp, and 2
      // ulp or 2^−22.6: far below the rounding of O to 16 bits, and of the lse's tolerance).
      //
      // At d = 64 (O_STAGED) with O on 16 bytes, the warp first writes its 16 rows to shared
      // memory, four bytes a thread as the accumulator holds them, then reads them back and
      // stores them 16 bytes a thread, eight threads to a row's 128 contiguous bytes: 4 global
      // stores a thread where there would be 16 (LOG.md, "O staged by each warp"). Elsewhere
      // (O not on 16 bytes) it writes two neighbouring values a time, as d = 128 can.
      // The buffer is the warp's own 16 rows of one shared tile, used by every Q tile in turn:
      // __syncwarp() before writing it (no lane still reads the last tile's rows) and after.
      const bool wide = tc::store_c_wide(S::wide_o_d128 && D == 128, O);
      const bool staged = tc::store_c_wide(Sh::O_STAGED, O);  // 16-byte stores need O on 16 bytes
      T* const o_head = O + batch * o_strides.batch + head * o_strides.head;
      uint8_t* const o_stage = smem + L::o + (row0 - i0 - g) * Sh::O_ROW;  // the warp's 16 rows
      if (staged) __syncwarp();
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
        const int row = row0 + 8 * r;
        const float inv = l[r] > 0.0f ? dev::fast_rcp(l[r]) : 0.0f;
        if (staged) {
          uint8_t* const to = o_stage + (g + 8 * r) * Sh::O_ROW;
#pragma unroll
          for (int c = 0; c < D / 8; ++c)  // columns 8c + 2t and 8c + 2t + 1 of the row
            st_shared_u32(to + 2 * (8 * c + 2 * t), tc::pack2<T>(o[4 * c + 2 * r] * inv, o[4 * c + 2 * r + 1] * inv));
        } else {
          T* o_row = o_head + static_cast<int64_t>(row) * o_strides.row;
          tc::store_c_row<T, D>(o_row, o, r, inv, t, wide, row < seq_q);  // rows past Nq: not written
        }
        if (row >= seq_q) continue;
        if (lse && t == 0) {
          lse[static_cast<int64_t>(batch * order.h + head) * seq_q + row] =
              l[r] > 0.0f ? (m[r] + dev::fast_log2(l[r])) * 0.6931471805599453f : -INFINITY;
        }
      }
      if (staged) {
        // O is written once and never read by the kernel: its stores carry the streaming hint
        // (__stcs, st.global.cs: evict first), which leaves L2 to K and V (LOG.md, "O's stores
        // marked as streaming").
        __syncwarp();
        constexpr int PIECES = D / 8;      // 16-byte pieces of a row
        constexpr int ROWS = 32 / PIECES;  // rows the warp's lanes cover at once
        constexpr int PASSES = 16 / ROWS;  // pieces a lane copies: piece c of rows r0 + ROWS·k
        const int c = lane % PIECES, r0 = lane / PIECES, first = row0 - g + r0;  // first: the lane's first row
        // The lane's pieces are all read first, then stored, a row's step apart: one wait for
        // shared memory, not one before each store (LOG.md, "Measured: where O's stores cost,
        // and the copy-out's loads first").
        uint4 piece[PASSES];
#pragma unroll
        for (int k = 0; k < PASSES; ++k) piece[k] = ld_shared_u4(o_stage + (r0 + ROWS * k) * Sh::O_ROW + 16 * c);
        T* to = o_head + static_cast<int64_t>(first) * o_strides.row + 8 * c;
        const int64_t step = static_cast<int64_t>(ROWS) * o_strides.row;
#pragma unroll
        for (int k = 0; k < PASSES; ++k, to += step) {
          if (first + ROWS * k < seq_q) __stcs(reinterpret_cast<uint4*>(to), piece[k]);  // rows past Nq: not written
        }
      }
    }
    // The last consumer's last turn let consumer 0 go once more; take that arrival.
    if (PINGPONG && cw == 0) named_barrier_sync(1, 2 * WG);
  }
}

namespace {

template <typename T, int D, class S>
void launch(const AttentionProblem& p, const void* Q, const void* K, const void* V, void* O, float* lse,
            const Layout& layout, const Plan& plan) {
  constexpr int BR = Shape<D, S>::BR;
  static_assert(BR == Br, "the plan's tables are made for Q tiles of Br rows");
  require_copyable(p, layout, "stage 12");
  const int64_t bh = p.batch_heads();
  const CUtensorMap tq = tensor_map_4d<T>(Q, p, p.seq_q, layout.q, BR, "stage 12");
  const CUtensorMap tk = tensor_map_4d<T>(K, p, p.seq_kv, layout.k, Bc, "stage 12");
  const CUtensorMap tv = tensor_map_4d<T>(V, p, p.seq_kv, layout.v, Bc, "stage 12");
  const int smem = Smem<D, S>::bytes;
  FA_CUDA_CHECK(cudaFuncSetAttribute(masked_kernel<T, D, S>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));

  const unsigned tiles = q_tile_grid(p, BR, "stage 12");
  // Tile numbers, and the schedule's offsets past them, fit an int.
  if (static_cast<int64_t>(tiles) + 2 * 65536 > 2147483647) throw InputError("stage 12: too many query tiles");
  TileOrder order{};
  order.q_tiles = static_cast<int>(plan.q_tiles());
  order.h = static_cast<int>(p.heads);
  order.rank = plan.tables().rank;
  int device = 0, sms = 0;
  FA_CUDA_CHECK(cudaGetDevice(&device));
  FA_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const bool persistent = plan.persistent(p.dim);
  const unsigned blocks = persistent ? std::min(tiles, static_cast<unsigned>(sms)) : tiles;
  if (persistent) {
    // A schedule is made (and copied to the device) on a plan's first call for these heads;
    // while the stream captures a CUDA graph no copy may run, so that call must come first.
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    FA_CUDA_CHECK(cudaStreamIsCapturing(fa::stream(), &capture));
    order.schedule = plan.schedule(bh, static_cast<int>(blocks), capture == cudaStreamCaptureStatusNone);
    if (!order.schedule) {
      throw InputError("stage 12: a plan's first call for " + std::to_string(bh) +
                       " heads (B·H) makes its schedule on the device, which cannot happen while a CUDA graph "
                       "is captured: call it once with these heads before capturing");
    }
  }
  const Plan::DeviceTables& pt = plan.tables();
  masked_kernel<T, D, S><<<blocks, Shape<D, S>::THREADS, smem, fa::stream()>>>(
      tq, tk, tv, static_cast<T*>(O), layout.o, lse, static_cast<int>(p.seq_q), static_cast<float>(p.scale) * LOG2E,
      order, Tables{pt.keys, pt.list_at, pt.list});
  FA_CHECK_LAUNCH("masked_kernel");
}

/// The three entry points below: one name of this file's own, which argument-dependent
/// lookup cannot confuse with the same function of a planted copy (tests), as it would the
/// public names (their Plan argument lives in fa::masks).
void run(const AttentionProblem& p, const void* Q, const void* K, const void* V, void* O, float* lse,
         const Layout& layout, const Plan& plan) {
  tc::with_mma_type(p.dtype, "stage 12", [&](auto type) {
    using T = decltype(type);
    hopper::require_head_dim(p.dim, "stage 12");
    const std::string why = unavailable_reason();
    if (!why.empty()) throw NoGpuError(why);
    plan.require_fits(p);
    (p.dim == 64 ? launch<T, 64, Tuned> : launch<T, 128, Tuned>)(p, Q, K, V, O, lse, layout, plan);
  });
}

}  // namespace

std::string unavailable_reason() {
  const std::string why = hopper::unavailable_reason();
  return why.empty() ? why : "stage 12 runs on stage 08's machinery: " + why;
}

void attention_strided(const AttentionProblem& p, const void* Q, const void* K, const void* V, void* O, float* lse,
                       const Layout& layout, const Plan& plan) {
  run(p, Q, K, V, O, lse, layout, plan);
}

void attention(const AttentionProblem& p, const void* Q, const void* K, const void* V, void* O, float* lse,
               const Plan& plan) {
  run(p, Q, K, V, O, lse, Layout::contiguous(p), plan);
}

void attention(const AttentionProblem& p, const void* Q, const void* K, const void* V, void* O, float* lse,
               const Mask& mask) {
  run(p, Q, K, V, O, lse, Layout::contiguous(p), Plan(p, mask));
}

}  // namespace fa::masks
