/**
 * \file hopper_attention.cu
 * \brief Stage 08: FlashAttention-2 on Hopper's own machinery: TMA copies into a ring of
 *        K/V buffers, mbarriers, warpgroup matrix products (wgmma) and warp specialisation.
 *
 * The idea: stage 07 feeds the tensor cores by hand: every thread issues its share of
 * each copy (cp.async), waits for it, loads fragments with ldmatrix and runs 16×8×16
 * mma.sync products one warp at a time. Hopper moves all of that off the threads:
 *
 *     warpgroup 0, the producer (one thread works; the others have given their registers away):
 *         TMA: Q_i → shared memory, completing on barrier q_full
 *         for each K/V tile j:  wait until slot j % S of the ring is empty,
 *                               TMA: K_j → slot, V_j → slot (barriers k_full, v_full)
 *     warpgroups 1 and 2, the consumers (64 query rows each):
 *         wait q_full;  S = Q_i·K_0ᵀ;  P_0 = softmax(S)
 *         for each K/V tile j:                         (the two consumers take turns to issue)
 *             issue S = Q_i·K_{j+1}ᵀ                   (wgmma, both operands in shared memory)
 *             issue O += P_j·V_j                       (wgmma, P from registers)
 *             wait for S;  mask, m_new = max(m, rowmax(S)), S = 2^(S − m_new),
 *                          alpha = 2^(m − m_new), l = alpha·l + rowsum(S)
 *                                                      (while the tensor cores still run P_j·V_j)
 *             wait for P_j·V_j;  arrive on empty[slot j];  P_{j+1} = S in 16 bits;  O = alpha·O
 *         O = O / l; write O and lse
 *     (and again for the block's next Q tile, if it has one)
 *
 * What changed since stage 07: copies are issued by one thread for a whole tile and
 * counted in bytes on an mbarrier (no per-thread wait); the tiles land 128-byte swizzled,
 * as the tensor cores read them; one wgmma instruction multiplies a 64×16 slice of Q by a
 * whole 16×128 slice of Kᵀ for four warps at once, reading shared memory directly; the
 * producer and the consumers are different warps, so copies and math overlap without the
 * consumers ever issuing a copy; and the softmax of one tile runs while the tensor cores
 * multiply the previous one, with the two consumer warpgroups taking turns at issuing their
 * products. The kernel is a template on its configuration (tuning.h): `Tuned` is the finished
 * kernel, and each variant there undoes or changes one step of LOG.md (`--variant NAME`).
 * Cost: no workspace; HBM traffic as stage 07 (Q and O once, K and V once per Q tile).
 * Parallelism: B·H·⌈Nq/128⌉ Q tiles, for blocks of 384 threads, one block a multiprocessor:
 * at d = 64, and at d = 128 up to Nkv = 8192, one block on each multiprocessor takes tile
 * after tile (persistent()), the producer copying the next tile's Q and K/V while the
 * consumers finish the last one; at d = 128 beyond that, a block for each tile.
 *
 * Run: `stage08_hopper --dim 128` (needs a Hopper GPU), or `stage08_hopper_cpu --dim 128` (the CPU
 * backend's emulation of these instructions, on any machine)
 */
#include "stages/08_hopper/hopper_attention.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "common/cuda_check.h"
#include "common/device_math.cuh"
#include "common/errors.h"
#include "common/head_dim.h"
#include "common/stream.h"
#include "common/trace.h"  // FA_TRACE: trace points for the See it run page, nothing elsewhere
#include "stages/06_tensor_cores/mma.cuh"
#include "stages/08_hopper/hopper.cuh"
#include "stages/08_hopper/tuning.h"

namespace fa::hopper {

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
};

/// The lazy rescale's slack, in base-2 units: with lazy rescaling a row's max moves only
/// when a score passes it by more than this, so P ≤ 2^8, which fp16 and bf16 hold.
constexpr float RESCALE_SLACK = 8.0f;

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
  static constexpr int tile = bars + (2 * QB + 3 * STAGES) * 8;  ///< each Q buffer's tile number (an int)
  static constexpr int bytes = tile + 8 * QB + 1024;    ///< + slack to align the base
};

/// Which Q tiles there are, and which block takes which: tile number t → (Q tile, batch·head).
/// Numbers run head by head, so that the blocks running at one time share a few heads' K
/// and V in L2. Under the causal mask a Q tile's work grows with its index (its K/V tiles
/// stop at the diagonal), and with one block a multiprocessor (`persistent`) every block
/// should get the same work: so numbers 2u and 2u + 1 are a pair, the Q tiles p and
/// q_tiles − 1 − p of one head, the lightest and the heaviest, and a block takes both. Every
/// pair has about the same work. (With an odd count the middle tile pairs with itself and
/// is taken once.) A block for each tile: under the causal mask, each head's heaviest first.
struct TileOrder {
  int q_tiles;   ///< Q tiles of one head
  int heads;     ///< B·H
  int h;         ///< H, heads a batch: head bh is head bh % h of batch bh / h
  bool persistent;  ///< one block a multiprocessor, taking every gridDim.x-th tile or pair
  bool causal;   ///< the causal mask (top-left aligned)
  /// Whether numbers come in pairs as above: causal and persistent.
  __host__ __device__ bool paired() const { return persistent && causal; }
  /// Pairs of Q tiles a head has.
  __host__ __device__ int pairs() const { return (q_tiles + 1) / 2; }
  /// Tile numbers there are (pairs count two each).
  __device__ int count() const { return paired() ? 2 * heads * pairs() : heads * q_tiles; }
  /// The first number block b takes.
  __device__ int first(int b) const { return paired() ? 2 * b : b; }
  /// The number a block takes after t, with `blocks` blocks (count() or more: none).
  __device__ int next(int t, int blocks) const {
    if (!persistent) return count();
    if (!paired()) return t + blocks;
    return t % 2 == 0 ? t + 1 : t - 1 + 2 * blocks;
  }
  /// The Q tile and head of number t; false for the second half of a middle tile's pair.
  __device__ bool coords(int t, int& qt, int& bh) const {
    if (!paired()) {
      bh = t / q_tiles;
      qt = causal ? q_tiles - 1 - t % q_tiles : t % q_tiles;
      return true;
    }
    const int p = t / 2 % pairs();
    bh = t / 2 / pairs();
    qt = t % 2 == 0 ? q_tiles - 1 - p : p;
    return t % 2 == 0 || qt != q_tiles - 1 - p;
  }
};

/**
 * The producer warpgroup and C consumers (see the file's comment). When `order.persistent`,
 * the grid has one block a multiprocessor, and block b takes tiles b, b + gridDim.x, b + 2·gridDim.x,
 * ... (pairs of tiles, under the causal mask) of the TileOrder: the producer copies the next
 * tile's Q and K/V while the consumers still finish and write the last one. Without it, a
 * block for each tile. The tensor maps describe Q, K and V as [B][H][N][D], each with its
 * own strides (a PyTorch view is read where it lies); O is written through `o_strides`.
 */
template <typename T, int D, class S>
__global__ void __launch_bounds__(Shape<D, S>::THREADS, 1)
    hopper_kernel(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tk,
                  const __grid_constant__ CUtensorMap tv, T* O, Strides o_strides, float* lse, int seq_q, int seq_kv,
                  float scale_log2, TileOrder order) {
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
  volatile int* tile_number = reinterpret_cast<volatile int*>(smem + L::tile);  // [QB]
  const bool causal = order.causal;
  const int kv_tiles = (seq_kv + Bc - 1) / Bc;
  // K/V tiles Q tile qt needs: under the causal mask, up to its last row's diagonal.
  const auto tiles_for = [&](int qt) {
    return causal ? min(kv_tiles, (min((qt + 1) * BR, seq_q) - 1) / Bc + 1) : kv_tiles;
  };

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
      int t = order.first(blockIdx.x);
      for (int n = 0;; ++n) {
        int qt = 0, bh = 0;
        while (t < order.count() && !order.coords(t, qt, bh)) t = order.next(t, gridDim.x);
        // Tile n takes Q buffer n % QB, in its round n / QB.
        const int b = n % QB, q_round = n / QB;
        mbarrier_wait(&q_empty[b], (q_round & 1) ^ 1);  // the consumers are done with this buffer (round 0: free)
        if (t >= order.count()) {                     // no more tiles: tell the consumers
          tile_number[b] = -1;
          mbarrier_arrive(&q_full[b]);
          break;
        }
        tile_number[b] = t;  // published by the arrive below
        mbarrier_arrive_expect_tx(&q_full[b], L::Q_BYTES);
        for (int c = 0; c < D / BOX; ++c) {
          tma_load_4d(smem + L::q + b * L::Q_BYTES + c * BR * 128, &tq, &q_full[b], c * BOX, qt * BR, bh % order.h,
                      bh / order.h);
        }
        FA_TRACE(ring("load", "Q", b, -1, -1));  // the ring's steps, for See it run
        const int n_tiles = tiles_for(qt);
        for (int j = 0; j < n_tiles; ++j, ++it) {
          // exercise 08-parity: K/V tile number `it` goes to slot s of the ring in round it / STAGES; wait until the consumers have emptied the slot: which phase of empty[s] must have completed?
          //   stub: const int s = it % STAGES;
          const int s = it % STAGES, round = it / STAGES;
          mbarrier_wait(&empty[s], (round & 1) ^ 1);  // the consumers are done with this slot (round 0: free)
          FA_TRACE(ring("wait", "empty", s, (round & 1) ^ 1, it));
          // end exercise 08-parity
          mbarrier_arrive_expect_tx(&k_full[s], L::KV_BYTES);
          for (int c = 0; c < D / BOX; ++c)
            tma_load_4d(smem + L::k + s * L::KV_BYTES + c * Bc * 128, &tk, &k_full[s], c * BOX, j * Bc, bh % order.h,
                        bh / order.h);
          mbarrier_arrive_expect_tx(&v_full[s], L::KV_BYTES);
          for (int c = 0; c < D / BOX; ++c)
            tma_load_4d(smem + L::v + s * L::KV_BYTES + c * Bc * 128, &tv, &v_full[s], c * BOX, j * Bc, bh % order.h,
                        bh / order.h);
          FA_TRACE(ring("load", "K, V", s, -1, it));
        }
        t = order.next(t, gridDim.x);
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

    // S = Q_i·K_jᵀ: D/16 products of 64×16 by 16×Bc, issued (not waited for).
    const auto issue_s = [&](int j) {
      const int slot = (it + j) % STAGES;
      const uint8_t* Ks = smem + L::k + slot * L::KV_BYTES;
      const int phase = ((it + j) / STAGES) & 1;  // the parity of the slot's fill in this round of the ring
      mbarrier_wait(&k_full[slot], phase);
      FA_TRACE(ring("wait", "k_full", slot, phase, it + j));
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        const int box = kk / 4, along = (kk % 4) * 32;  // 16 columns are 32 bytes along a 128-byte row
        const uint64_t a = smem_desc(smem + L::q + qb * L::Q_BYTES + box * BR * 128 + cw * 64 * 128 + along, 16, 1024);
        const uint64_t b = smem_desc(Ks + box * Bc * 128 + along, 16, 1024);
        wgmma_ss<T, Bc>(s, a, b, kk > 0);
      }
      wgmma_commit();
      FA_TRACE(ring("issue", "S = Q·Kᵀ", slot, -1, it + j));
    };

    // O += P·V_j: Bc/16 products of 64×16 (P, registers) by 16×D (V, MN-major), issued.
    const auto issue_pv = [&](int j, const uint32_t(&pj)[Bc / 16][4]) {
      const int slot = (it + j) % STAGES;
      const uint8_t* Vs = smem + L::v + slot * L::KV_BYTES;
      const int phase = ((it + j) / STAGES) & 1;
      mbarrier_wait(&v_full[slot], phase);
      FA_TRACE(ring("wait", "v_full", slot, phase, it + j));
      fence_registers(o);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < Bc / 16; ++kk) {
        // TODO(exercise 08-desc): the descriptor of V's rows 16kk .. 16kk + 15, MN-major: its address, the leading byte offset (from one 64-column box to the next) and the stride byte offset (from eight rows to the next eight)
        const uint64_t b = smem_desc(Vs, 0, 0);
        wgmma_rs<T, D>(o, pj[kk], b, true);
      }
      wgmma_commit();
      FA_TRACE(ring("issue", "O += P·V", slot, -1, it + j));
    };
    const auto release = [&](int j) {
      mbarrier_arrive(&empty[(it + j) % STAGES]);
      FA_TRACE(ring("arrive", "empty", (it + j) % STAGES, -1, it + j));
    };

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

    // The online softmax of tile j on this thread's two rows (each row lives in one quad of
    // lanes), in S's registers: S becomes 2^(S·scale·log2 e − m_new); m and l move on, and
    // alpha is returned, by which O is still to be rescaled. With lazy rescaling
    // (Shape::LAZY, as in stage 07) m moves only when the tile's max passes it by more than
    // RESCALE_SLACK: P may then exceed 1, up to 2^8, but O and l share the same m and O / l
    // is unchanged; a warp none of whose rows moved skips O's rescale. Returns whether
    // either of this thread's rows moved.
    const auto softmax = [&](int j, float(&alpha)[2]) {
      const int j0 = j * Bc;
      // One test a tile, and the mask only where it crosses the end or the diagonal. (A test
      // of that condition inside the loops below compiled to a compare and a select on every
      // score of every tile: a quarter more instructions, 13% more time at d = 64.)
      if (j0 + Bc > seq_kv || (causal && j0 + Bc - 1 > i0 + 64 * cw)) {
#pragma unroll
        for (int n = 0; n < Bc / 8; ++n) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int row = row0 + 8 * (e / 2), col = j0 + 8 * n + 2 * t + e % 2;
            if (col >= seq_kv || (causal && col > row)) s[4 * n + e] = -INFINITY;
          }
        }
      }
      bool moved = false;  // has either row's max moved?
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float mx = tc::quad_max(reduce(r, [](float a, float b) { return fmaxf(a, b); })) * scale_log2;
        // finite: every row sees key 0 in tile 0
        const float m_new = Sh::LAZY ? (mx > m[r] + RESCALE_SLACK ? mx : m[r]) : fmaxf(m[r], mx);
        alpha[r] = dev::fast_exp2<true>(m[r] - m_new);  // 0 on the first tile
        moved |= m_new != m[r];
#pragma unroll
        for (int n = 0; n < Bc / 8; ++n) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            float& x = s[4 * n + 2 * r + e];
            x = dev::fast_exp2<true>(fmaf(x, scale_log2, -m_new));
          }
        }
        l[r] = alpha[r] * l[r] + reduce(r, [](float a, float b) { return a + b; });
        m[r] = m_new;
      }
      FA_TRACE(ring("softmax", "", -1, -1, it + j));
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
      if (PINGPONG) FA_TRACE(ring("turn", "", -1, -1, -1));
    };
    const auto next_turn = [&] {
      if (PINGPONG) named_barrier_arrive(1 + (cw + 1) % C, 2 * WG);
      if (PINGPONG) FA_TRACE(ring("pass", "", -1, -1, -1));
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
      const bool moved = softmax(j + 1, alpha);
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
      const int number = tile_number[qb];
      if (number < 0) break;
      int qt, bh;
      order.coords(number, qt, bh);
      i0 = qt * BR;
      row0 = i0 + 64 * cw + 16 * warp + g;
      const int n_tiles = tiles_for(qt);
      for (int i = 0; i < D / 2; ++i) o[i] = 0.0f;
      m[0] = m[1] = -INFINITY;
      l[0] = l[1] = 0.0f;

      issue_s(0);
      wgmma_wait<0>();
      fence_registers(s);
      {
        float alpha[2];  // O is still 0: nothing to rescale
        softmax(0, alpha);
      }
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
      it += n_tiles;

      // O / l, once, and the log-sum-exp. At d = 128 each thread writes 16 bytes a store, after
      // a transpose across its quad (tuning.h's wide_o_d128, where O starts on 16 bytes); at
      // d = 64, or O elsewhere, two neighbouring values a store.
      const bool wide = tc::store_c_wide(S::wide_o_d128 && D == 128, O);
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
        const int row = row0 + 8 * r;
        T* o_row = O + o_strides.head_offset(bh, order.h) + static_cast<int64_t>(row) * o_strides.row;
        tc::store_c_row<T, D>(o_row, o, r, 1.0f / l[r], t, wide, row < seq_q);  // rows past Nq: not written
        if (row < seq_q && lse && t == 0) {
          lse[static_cast<int64_t>(bh) * seq_q + row] = (m[r] + log2f(l[r])) * 0.6931471805599453f;
        }
      }
    }
    // The last consumer's last turn let consumer 0 go once more; take that arrival.
    if (PINGPONG && cw == 0) named_barrier_sync(1, 2 * WG);
  }
}

namespace {

template <class S>
bool persistent_as(const AttentionProblem& p) {
  if constexpr (S::schedule != Schedule::by_shape) {
    return S::schedule == Schedule::persistent;
  } else {
    // d = 64 at every length; d = 128 where tiles are short: Nkv ≤ 8192 (LOG.md measures both)
    return p.dim == 64 || (p.seq_kv + Bc - 1) / Bc <= 64;
  }
}

template <typename T, int D, class S>
void launch(const AttentionProblem& p, const void* Q, const void* K, const void* V, void* O, float* lse,
            const Layout& layout) {
  constexpr int BR = Shape<D, S>::BR;
  if (p.seq_q > 2147483647 - BR || p.seq_kv > 2147483647 - Bc) throw InputError("stage 08: sequences too long");
  require_copyable(p, layout, "stage 08");
  const int64_t bh = p.batch_heads();
  const CUtensorMap tq = tensor_map_4d<T>(Q, p, p.seq_q, layout.q, BR, "stage 08");
  const CUtensorMap tk = tensor_map_4d<T>(K, p, p.seq_kv, layout.k, Bc, "stage 08");
  const CUtensorMap tv = tensor_map_4d<T>(V, p, p.seq_kv, layout.v, Bc, "stage 08");
  const int smem = Smem<D, S>::bytes;
  FA_CUDA_CHECK(cudaFuncSetAttribute(hopper_kernel<T, D, S>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));

  const unsigned tiles = q_tile_grid(p, BR, "stage 08");
  // Tile numbers (pairs round the count up by a tile a head) and the steps past them fit an int.
  if (static_cast<int64_t>(tiles) + bh + 2 * 65536 > 2147483647) throw InputError("stage 08: too many query tiles");
  TileOrder order{};
  order.q_tiles = static_cast<int>((p.seq_q + BR - 1) / BR);
  order.heads = static_cast<int>(bh);
  order.h = static_cast<int>(p.heads);
  order.causal = p.causal;
  order.persistent = persistent_as<S>(p);
  int device = 0, sms = 0;
  FA_CUDA_CHECK(cudaGetDevice(&device));
  FA_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const unsigned units = order.paired() ? static_cast<unsigned>(bh * order.pairs()) : tiles;
  const unsigned blocks = order.persistent ? std::min(units, static_cast<unsigned>(sms)) : tiles;
  hopper_kernel<T, D, S><<<blocks, Shape<D, S>::THREADS, smem, fa::stream()>>>(
      tq, tk, tv, static_cast<T*>(O), layout.o, lse, static_cast<int>(p.seq_q), static_cast<int>(p.seq_kv),
      static_cast<float>(p.scale) * LOG2E, order);
  FA_CHECK_LAUNCH("hopper_kernel");
}

/// Refuses what no stage-08 kernel runs, with a message: another head dim, or a GPU that is
/// not a Hopper.
void require_runnable(const AttentionProblem& p) {
  require_head_dim(p.dim, "stage 08");
  const std::string why = unavailable_reason();
  if (!why.empty()) throw NoGpuError(why);
}

/// A variant of tuning.h, built for what LOG.md measures: fp16 (at d = 64 and 128).
template <class S>
void run_variant(const AttentionProblem& p, const DeviceTensors& t, void*) {
  if (p.dtype != DType::F16) throw InputError(std::string("stage 08's variant ") + S::name + " runs fp16 only");
  require_runnable(p);
  (p.dim == 64 ? launch<__half, 64, S> : launch<__half, 128, S>)(p, t.q, t.k, t.v, t.o, t.lse, Layout::contiguous(p));
}

}  // namespace

std::string unavailable_reason() {
  // Two attributes, cheap enough for every call of attention(); the name only when needed.
  int device = 0, major = 0, minor = 0;
  FA_CUDA_CHECK(cudaGetDevice(&device));
  FA_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  FA_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  if (major == 9 && minor == 0) return "";
  cudaDeviceProp prop{};
  FA_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  return std::string("stage 08 needs a Hopper GPU (compute capability 9.0, sm_90a); this is ") + prop.name +
         " (compute capability " + std::to_string(major) + "." + std::to_string(minor) + ")";
}

void require_head_dim(int64_t d, const char* stage) {
  if (d != 64 && d != 128) {
    throw InputError(std::string(stage) + ": head dim " + std::to_string(d) + " is not supported (64 or 128)");
  }
}

std::size_t shared_bytes(int64_t d) {
  require_head_dim(d, "stage 08");
  return d == 64 ? Smem<64, Tuned>::bytes : Smem<128, Tuned>::bytes;
}

int consumers(int64_t d) {
  require_head_dim(d, "stage 08");
  return d == 64 ? Shape<64, Tuned>::C : Shape<128, Tuned>::C;
}

int block_rows(int64_t d) { return 64 * consumers(d); }

bool persistent(const AttentionProblem& p) { return persistent_as<Tuned>(p); }

double hbm_bytes_model(const AttentionProblem& p) { return q_outer_hbm_bytes(p, block_rows(p.dim)); }

void attention_strided(const AttentionProblem& p, const void* Q, const void* K, const void* V, void* O, float* lse,
                       const Layout& layout) {
  tc::with_mma_type(p.dtype, "stage 08", [&](auto type) {
    using T = decltype(type);
    require_runnable(p);
    (p.dim == 64 ? launch<T, 64, Tuned> : launch<T, 128, Tuned>)(p, Q, K, V, O, lse, layout);
  });
}

void attention(const AttentionProblem& p, const void* Q, const void* K, const void* V, void* O, float* lse) {
  attention_strided(p, Q, K, V, O, lse, Layout::contiguous(p));
}


}  // namespace fa::hopper
