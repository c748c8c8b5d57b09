// BUG(exercise 13-bug): this copy of hopper_backward.cu differs from a correct kernel in one place, and the tests of exercise 13-bug fail. Find it, fix it, then delete this line.
/**
 * \file hopper_backward.cu
 * \brief Stage 13: the backward pass on Hopper's own machinery. Stage 11's algorithm, with
 *        stage 08's TMA copies, mbarriers, warpgroup products (wgmma) and warp specialisation.
 *
 * The idea: stage 11 runs the five products of a tile pair as mma.sync, every warp loading
 * its own fragments with ldmatrix and issuing its own copies. Here a producer warpgroup copies
 * the tiles by TMA and two consumer warpgroups multiply them with wgmma, which reads both
 * operands from shared memory (or A from registers) for four warps at once. Each consumer
 * owns 64 of the block's Bc = 128 keys and computes the transposes, as stage 11 does:
 *
 *     warpgroup 0, the producer (one thread works):
 *         TMA: K_j, V_j → shared memory once (barrier kv_full)
 *         for each Q tile i that sees a key of tile j:   wait until buffer i % 2 is free,
 *             TMA: Q_i, dO_i, and kernel 1's lse_i and D_i → buffer i % 2 (barrier q_full)
 *         d = 64 and deterministic, its second warp, the dQ warp, for each Q tile i: wait
 *             until both halves of dQ_i are in shared memory (named barrier dq_full) and,
 *             deterministic, until Q tile i's flag says it is K/V tile j's turn; add them into
 *             dQacc_i with one bulk reduction; once it has read them (deterministic: once it
 *             is done, and the turn passed on), say the buffer is free (dq_empty)
 *     warpgroups 1 and 2, the consumers (keys 64w .. 64w + 63 of the tile):
 *         for each such Q tile i:
 *             wait q_full;  issue Sᵀ = K_w·Q_iᵀ, then dPᵀ = V_w·dO_iᵀ       (wgmma, both in shared memory)
 *             read lse_i (Br = 128: after the first wait) and D_i (after a wait) for this
 *             thread's queries from shared memory
 *             wait for Sᵀ:  Pᵀ = 2^(scale·log2e·Sᵀ − lse·log2e)   (masked where the tile crosses
 *                           the diagonal or the end of the keys; dPᵀ is still being computed)
 *             wait for dPᵀ: dSᵀ = Pᵀ ∘ (dPᵀ − D)
 *             dSᵀ → shared memory, transposed (dS: rows are queries), for dQ
 *             issue dV_w += Pᵀ·dO_i,  dK_w += dSᵀ·Q_i            (wgmma, A from registers;
 *                                                             d = 128: dK after dQ, below)
 *             both consumers' dS written (a named barrier of the two):
 *             issue consumer w's part of dQ_i = dS·K_j            (wgmma, both in shared memory)
 *             d = 64: wait for all three; hand buffer i % 2 back
 *             d = 128: issue dK_w += dSᵀ·Q_i; wait for dV and dQ only (dK runs on under dQ's store)
 *             dQacc_i += dQ_i, the halves → shared memory (fp32; each row's 8-column groups
 *             swizzled, so that the stores meet no bank conflicts), added by one bulk reduction
 *             (cp.reduce.async.bulk .add.f32): d = 128, after a named barrier, by one consumer
 *             thread; d = 64 and deterministic (--variant deterministic), by the dQ warp,
 *             which the consumers only tell (bar.arrive), and go on (tuning.h: what LOG.md
 *             measured); deterministic, the Q tiles taken from the last down
 *             d = 128: wait for dK; hand buffer i % 2 back
 *         a block cut in two (the last round, no mask): the first part to finish leaves its
 *             sums in the workspace, the second adds them to its own
 *         write dV_w and scale·dK_w, rounded to fp16/bf16
 *
 * Kernels 1 (D and lse·log2e into a padded workspace, dQacc zeroed) and 3 (dQ = scale·dQacc,
 * rounded, read back from the swizzled order) are stage 11's: tc_backward::prepare() and
 * finish_dq().
 *
 * Layouts: Sᵀ's accumulators (keys are rows) turned into 16-bit pairs are exactly the A
 * fragments of Pᵀ·dO, as P was the A operand of P·V in stage 08; the same holds for dSᵀ.
 * The B operands dO and Q of those products are read MN-major (the sum runs down their
 * rows), as stage 08 reads V. dS = (dSᵀ)ᵀ is the one operand that must be transposed: each
 * warp stores its dSᵀ fragments transposed (stmatrix .trans, one instruction a k-step) into a
 * 128-byte swizzled tile of Br rows × Bc keys, which wgmma then reads K-major, and K is read
 * MN-major for dQ = dS·K.
 * Each consumer computes a part of dQ_i over all Bc keys: with Q tiles of Br = 128 rows (d = 64)
 * its 64 rows and all of d, with Br = 64 (d = 128) all the rows and half of d's columns. So
 * both consumers' dS must be in shared memory first; dS has two buffers, so one named barrier a
 * tile is enough (a consumer cannot overwrite a buffer before the other has passed the next
 * tile's barrier, by which time it has waited for its dQ product that read it).
 *
 * What changed since stage 11: one thread copies whole tiles by TMA into 128-byte swizzled
 * shared memory, counted on mbarriers, instead of every thread issuing cp.async; the products
 * are wgmma instead of mma.sync with ldmatrix; dS is read by the tensor cores through a
 * descriptor instead of ldmatrix.trans.
 * Cost: as stage 11 (workspace of 8 bytes a padded query row and dQ in fp32). HBM traffic: K, V
 * read and dK, dV written once; Q, dO, lse, D read and dQacc added to once per K/V tile of 128
 * keys. Parallelism: B·H·⌈Nkv/128⌉ blocks of 384 threads, one a multiprocessor; without the
 * mask the grid's last round of blocks is cut in two along the Q tiles, and the two parts of
 * each such block sum its dK and dV in the workspace (tail_split(), LOG.md).
 *
 * Run: `stage13_backward_hopper --dim 128` (needs a Hopper GPU), or `stage13_backward_hopper_cpu`
 * (the CPU backend's emulation of these instructions, on any machine)
 */
#include "stages/13_backward_hopper/hopper_backward.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <type_traits>

#include "common/cuda_check.h"
#include "common/device_math.cuh"
#include "common/errors.h"
#include "common/stream.h"
#include "stages/06_tensor_cores/mma.cuh"
#include "stages/08_hopper/hopper.cuh"
#include "stages/08_hopper/hopper_attention.h"
#include "stages/11_backward_tensor_cores/tensor_core_backward.h"
#include "stages/13_backward_hopper/tuning.h"

namespace fa::hopper_backward {

using namespace fa::hopper;  // the instructions' wrappers (stage 08's hopper.cuh)
constexpr float LOG2E = 1.4426950408889634f;  ///< log2(e): exp(x) = 2^(x·log2(e))

constexpr int WG = 128;             ///< threads of a warpgroup
constexpr int CONSUMERS = 2;        ///< consumer warpgroups, 64 keys each
constexpr int THREADS = WG * (1 + CONSUMERS);  ///< the producer warpgroup and the consumers
constexpr int PRODUCER_REGS = 24;   ///< registers a producer thread keeps (setmaxnreg)
constexpr int CONSUMER_REGS = 240;  ///< registers a consumer thread takes: 128 · (24 + 2 · 240) = 64,512
constexpr int QB = 2;               ///< buffers of Q_i and dO_i: the next tile lands while this one runs
// Named barriers (0 is __syncthreads): 1, both consumers' dS written; 2, both halves of dQ
// written, when a consumer thread adds them (the finished kernel at d = 128); 3 + w, the
// deterministic atomics' turns; with the dQ warp, the two below, each between the two
// consumers and the dQ warp.
constexpr int BAR_DQ_FULL = 5;   ///< + b: dQ buffer b is written (the consumers arrive, the dQ warp waits)
constexpr int BAR_DQ_EMPTY = 7;  ///< + b: its reduction has read buffer b (the dQ warp arrives, the consumers wait)
constexpr int DQ_PARTIES = CONSUMERS * WG + 32;  ///< the consumers and the dQ warp
constexpr int BAR_MEET = 9;      ///< the consumers, where a cut block's two parts meet
static_assert(Bc == 64 * CONSUMERS, "each consumer owns 64 keys: one wgmma M");

/// Where everything lives in the block's shared memory (byte offsets, 1024-aligned: the
/// 128-byte swizzle repeats every 1024 bytes) under configuration S (tuning.h). A tile of R
/// rows × D columns is stored as D/64 boxes of R rows × 128 bytes, as TMA writes it.
template <int D, class S>
struct Smem {
  /// Query rows of a Q tile at this head dim (tuning.h).
  static constexpr int BR = D == 64 ? S::br_d64 : 64;
  /// When dK's product is issued at this head dim (tuning.h).
  static constexpr DkOrder DK = D == 64 ? S::dk_d64 : S::dk_d128;
  /// How many of dK's BR/16 k-steps are issued beside dV's, before the barrier; the rest
  /// follow dQ's.
  static constexpr int DK_EARLY = DK == DkOrder::with_dv ? BR / 16 : DK == DkOrder::split ? BR / 32 : 0;
  /// Whether some of dK's product is issued after dQ's (and runs under dQ's store).
  static constexpr bool DK_LATE = DK_EARLY < BR / 16;
  static_assert(tc_backward::PAD_ROWS % BR == 0, "kernel 1 pads lse and D to whole tiles of PAD_ROWS rows");
  static constexpr int KV_BYTES = Bc * D * 2;  ///< one K (or V) tile
  static constexpr int Q_BYTES = BR * D * 2;   ///< one Q (or dO) tile
  static constexpr int DS_BYTES = BR * Bc * 2;  ///< dS: BR query rows × Bc keys, two boxes of 64 keys
  static constexpr int k = 0;                   ///< the K tile
  static constexpr int v = k + KV_BYTES;        ///< the V tile
  static constexpr int q = v + KV_BYTES;            ///< QB Q tiles
  static constexpr int d_o = q + QB * Q_BYTES;      ///< QB dO tiles
  static constexpr int ds = d_o + QB * Q_BYTES;     ///< two dS tiles
  /// How dQ's parts are added at this head dim (tuning.h).
  static constexpr DqAdd DQ = D == 64 ? S::dq_d64 : S::dq_d128;
  /// Who issues the bulk reduction at this head dim (tuning.h).
  static constexpr DqIssuer ISSUER = D == 64 ? S::dq_issuer_d64 : S::dq_issuer_d128;
  /// dQ_i's columns in a consumer's part, a wgmma of M = 64 query rows: Q tiles of 64 rows,
  /// all the rows and half w of d; of 128 rows, rows 64w .. 64w + 63 and all of d.
  static constexpr int DQ_N = BR == 128 ? D : D / 2;
  /// dQ of a tile in fp32, [BR][D] as in dQacc, for the bulk reduction (DQB buffers)
  static constexpr int DQ_BYTES = DQ == DqAdd::bulk ? BR * D * 4 : 0;
  /// dQ tiles (bulk only): at d = 128 two, so that the consumers write one while the reduction
  /// reads the other; at d = 64 one, to leave room for lse and D (a second was no faster: the
  /// reduction has read the tile long before the next is stored, LOG.md).
  static constexpr int DQB = D == 64 ? 1 : 2;
  static constexpr int dq = ds + 2 * DS_BYTES;      ///< DQB dQ tiles (bulk only)
  /// lse and D in shared memory (tuning.h), BR floats each, beside each Q buffer.
  static constexpr bool STATS_SHARED = S::stats == Stats::shared;
  static constexpr int STATS_BYTES = STATS_SHARED ? 2 * BR * 4 : 0;  ///< a Q buffer's lse, then D
  static constexpr int stats = dq + DQB * DQ_BYTES;   ///< QB × (lse, D) (TMA: 128-byte aligned)
  static constexpr int bars = stats + QB * STATS_BYTES;  ///< kv_full, q_full[QB], q_empty[QB]
  static constexpr int ticket = bars + 8 * (1 + 2 * QB);  ///< the block's ticket (deterministic only)
  static constexpr int role = ticket + 16;  ///< a cut block's part: first to finish or second
  static constexpr int bytes = role + 16 + 1024;  ///< + slack to align the base
  static_assert(bytes <= 227 * 1024, "a block's shared memory on Hopper");
};

namespace {
/**
 * The deterministic mode's flags (tuning.h's `deterministic`), after stage 11's workspace:
 * [0] the next ticket; then for each head and Q tile two ints, one for each half of d (the
 * atomics: each consumer adds its own half) or the first for the whole tile (the bulk
 * reduction). A flag holds the K/V tile whose turn it is to add to that part of dQ.
 */
int64_t flag_count(const AttentionProblem& p) {
  return 1 + p.batch_heads() * ((p.seq_q + 63) / 64) * 2;  // enough for Q tiles of 64 rows or more
}
std::size_t flag_bytes(const AttentionProblem& p) {
  return static_cast<std::size_t>(flag_count(p) * sizeof(int) + 15) / 16 * 16;
}

/// The blocks of block_coords(): one a (K/V tile, batch·head).
int64_t block_count(const AttentionProblem& p) { return (p.seq_kv + Bc - 1) / Bc * p.batch_heads(); }

/**
 * Where the two parts of a block cut by a TailSplit meet, after the flags: for each of up to
 * kMaxSplit blocks (none under the causal mask, which cuts none) two ints (the parts that have
 * come, and the first's flag: its sums are written), then each block's fp32 sums, dV's and
 * dK's of its 256 consumer threads, d floats each.
 */
int64_t meet_slots(const AttentionProblem& p) {
  return p.causal ? 0 : std::min<int64_t>(kMaxSplit, block_count(p));
}
int64_t meet_ints(const AttentionProblem& p) { return (2 * meet_slots(p) + 3) / 4 * 4; }  // the sums 16-byte aligned
std::size_t meet_bytes(const AttentionProblem& p) {
  return static_cast<std::size_t>(meet_ints(p) * sizeof(int) + meet_slots(p) * WG * CONSUMERS * p.dim * sizeof(float));
}
}  // namespace

/**
 * Kernel 2: one block per (K/V tile j, batch·head), flattened into blockIdx.x with the K/V
 * tiles of a head together (under the causal mask the first, which see the most Q tiles,
 * start first), except the last `tail_heads` heads, whose blocks go K/V tile by K/V tile
 * (block_coords(): under the causal mask the grid then ends on light blocks). Without the
 * mask the last round's blocks each take two grid blocks, the first part of their Q tiles
 * and then the rest (`split`, piece()), which meet in `partials` and `meet` to sum dK and dV.
 * The tensor maps describe Q, K, V and dO as [B][H][N][D], each with its own strides. lse2 and
 * Dvec are kernel 1's, padded to whole Q tiles (Nq_pad rows a head).
 *
 * Deterministic (S::deterministic): a block takes its (K/V tile, batch·head) from a ticket,
 * flags[0], in the order blocks start, and adds to Q tile i's dQ only when the tile's flag
 * says K/V tile j's turn has come, after tiles 0 .. j−1 have added theirs. A block waits only
 * for blocks that took earlier tickets, which have started, so the waits always end.
 */
template <typename T, int D, class S>
__global__ void __launch_bounds__(THREADS, 1)
    backward_kernel(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tk,
                    const __grid_constant__ CUtensorMap tv, const __grid_constant__ CUtensorMap tdo,
                    const __grid_constant__ CUtensorMap tlse, const __grid_constant__ CUtensorMap tdvec,
                    const float* lse2, const float* Dvec, float* dQacc, T* dK, T* dV, int* flags, int heads,
                    int seq_q, int seq_kv, int seq_q_pad, float scale, float scale_log2, bool causal,
                    int tail_heads, TailSplit split, float* partials, int* meet) {
  using L = Smem<D, S>;
  constexpr int Br = L::BR;  // query rows of a Q tile
  static_assert(!(S::deterministic && L::DQ == DqAdd::bulk && L::ISSUER == DqIssuer::consumer),
                "deterministic, the dQ warp issues the bulk reduction: it keeps the turns");
  extern __shared__ uint8_t smem_raw[];
  // Rounded as an integer, the pointer no longer tells the compiler it is shared memory: the
  // consumers' own loads and stores of it go through ld_shared_f2() and st_shared_f2(), not as
  // generic accesses (LOG.md).
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  uint64_t* kv_full = reinterpret_cast<uint64_t*>(smem + L::bars);
  uint64_t* q_full = kv_full + 1;    // [QB]
  uint64_t* q_empty = q_full + QB;   // [QB]

  int* ticket = reinterpret_cast<int*>(smem + L::ticket);  // deterministic only
  int* role = reinterpret_cast<int*>(smem + L::role);

  if (threadIdx.x == 0) {
    mbarrier_init(kv_full, 1);
    for (int b = 0; b < QB; ++b) {
      mbarrier_init(&q_full[b], 1);
      mbarrier_init(&q_empty[b], CONSUMERS * WG);  // every consumer thread arrives
    }
    mbarrier_init_fence();
    if constexpr (S::deterministic) *ticket = atomicAdd(flags, 1);
  }
  __syncthreads();

  // This grid block's piece (piece()): a whole block of block_coords(), or the first or the
  // second part of one of the last round's, cut along its Q tiles (`split`; deterministic,
  // every block whole).
  const int tile = S::deterministic ? *ticket : static_cast<int>(blockIdx.x);
  const int kv_tiles = (seq_kv + Bc - 1) / Bc;
  const int all_tiles = (seq_q + Br - 1) / Br;
  const Piece pc = S::deterministic ? Piece{tile, 0, all_tiles, -1} : piece(tile, split, all_tiles);
  const BlockCoords block = block_coords(pc.block, kv_tiles, (split.whole + split.split) / kv_tiles, tail_heads);
  const int bh = block.bh;
  const int j0 = block.kv_tile * Bc;
  // Under the causal mask query i sees key j only if j <= i: the block's Q tiles start at the
  // one that holds query j0, the first that sees a key of this tile; this piece's, pc.n_begin
  // tiles later. Deterministic, the loop runs the other way, from the last Q tile down: then
  // every block reaches a Q tile after as many tiles as the others, so each waits little for
  // its turn (up, the first K/V tiles, which see the most Q tiles, would reach each tile last
  // and hold up the rest).
  const int i_block = causal ? j0 / Br * Br : 0;  // the block's first Q tile
  const int block_tiles = seq_q > i_block ? (seq_q - i_block + Br - 1) / Br : 0;
  const int i_start = i_block + pc.n_begin * Br;
  const int q_tiles = (pc.n_end < block_tiles ? pc.n_end : block_tiles) - pc.n_begin;  // the loop's Q tiles
  const auto tile_row = [&](int n) { return i_start + (S::deterministic ? q_tiles - 1 - n : n) * Br; };
  // For the dQ warp and the consumers: the flag of part `half` of Q tile i0's dQ
  // (deterministic), this K/V tile's turn, and the head's rows of dQacc.
  const auto tile_flag = [&](int i0, int half) {
    return flags + 1 + (static_cast<int64_t>(bh) * ((seq_q + Br - 1) / Br) + i0 / Br) * 2 + half;
  };
  const int kv_turn = j0 / Bc;
  float* dq_rows = dQacc + static_cast<int64_t>(bh) * seq_q * D;

  const int wg = threadIdx.x / WG;
  if (wg == 0) {  // ---------------- the producer ----------------
    setmaxnreg_dec<PRODUCER_REGS>();
    if (threadIdx.x == 0) {
      const int h = bh % heads, b = bh / heads;
      mbarrier_arrive_expect_tx(kv_full, 2 * L::KV_BYTES);
      for (int c = 0; c < D / 64; ++c) {
        tma_load_4d(smem + L::k + c * Bc * 128, &tk, kv_full, 64 * c, j0, h, b);
        tma_load_4d(smem + L::v + c * Bc * 128, &tv, kv_full, 64 * c, j0, h, b);
      }
      for (int n = 0; n < q_tiles; ++n) {  // Q tile n of the loop: buffer n % QB, in its round n / QB
        const int i0 = tile_row(n);
        const int buf = n % QB;
        mbarrier_wait(&q_empty[buf], ((n / QB) & 1) ^ 1);  // the consumers are done with it (round 0: free)
        mbarrier_arrive_expect_tx(&q_full[buf], 2 * L::Q_BYTES + L::STATS_BYTES);
        for (int c = 0; c < D / 64; ++c) {
          tma_load_4d(smem + L::q + buf * L::Q_BYTES + c * Br * 128, &tq, &q_full[buf], 64 * c, i0, h, b);
          tma_load_4d(smem + L::d_o + buf * L::Q_BYTES + c * Br * 128, &tdo, &q_full[buf], 64 * c, i0, h, b);
        }
        if constexpr (L::STATS_SHARED) {  // lse_i and D_i, Br floats each (kernel 1 padded them to whole tiles)
          uint8_t* stats = smem + L::stats + buf * L::STATS_BYTES;
          tma_load_3d(stats, &tlse, &q_full[buf], i0, bh, 0);
          tma_load_3d(stats + Br * 4, &tdvec, &q_full[buf], i0, bh, 0);
        }
      }
    } else if constexpr (L::DQ == DqAdd::bulk && L::ISSUER == DqIssuer::dq_warp) {
      if (threadIdx.x / 32 == 1) {  // ---- the dQ warp: each tile's dQ into dQacc, one bulk reduction ----
        const int lane = threadIdx.x % 32;
        for (int n = 0; n < q_tiles; ++n) {
          const int i0 = tile_row(n), b = n % L::DQB;
          const int q_valid = seq_q - i0 < Br ? seq_q - i0 : Br;  // rows of the tile inside the head
          named_barrier_sync(BAR_DQ_FULL + b, DQ_PARTIES);  // both consumers' halves are in buffer b
          if (lane == 0) {
            if constexpr (S::deterministic) flag_wait(tile_flag(i0, 0), kv_turn);
            bulk_reduce_add(dq_rows + static_cast<int64_t>(i0) * D, smem + L::dq + b * L::DQ_BYTES,
                            static_cast<uint32_t>(q_valid * D * 4));
            bulk_commit();
            if constexpr (S::deterministic) {
              bulk_wait<0>();                    // the additions are done ...
              flag_release(tile_flag(i0, 0), kv_turn + 1);  // ... before the next K/V tile's turn
            } else {
              bulk_wait_read<0>();  // the reduction has read buffer b
            }
          }
          __syncwarp();
          if (n + L::DQB < q_tiles) named_barrier_arrive(BAR_DQ_EMPTY + b, DQ_PARTIES);  // tile n + DQB may write it
        }
        if (lane == 0) bulk_wait<0>();  // the reductions are done before the block ends
      }
    }
    return;
  }

  // ---------------- the consumers: warpgroup 1 + w owns keys 64w .. 64w + 63 of the tile ----------------
  setmaxnreg_inc<CONSUMER_REGS>();
  const int w = wg - 1;
  const int warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int key_w = j0 + 64 * w;  // the warpgroup's first key
  // This thread's keys (accumulator rows): key_w + 16·warp + g and + 8. Its queries (columns):
  // 8n + 2t and + 1 of the tile, n < Br/8 (Sᵀ, dPᵀ) or D/16 (dQ's half of d).
  const float* lse_h = lse2 + static_cast<int64_t>(bh) * seq_q_pad;
  const float* D_h = Dvec + static_cast<int64_t>(bh) * seq_q_pad;
  const uint8_t* Ks = smem + L::k;
  const uint8_t* Vs = smem + L::v;

  float dv[D / 2], dk[D / 2];  // dV_w and dK_w: 64 keys × D, the accumulator layout
#pragma unroll
  for (int i = 0; i < D / 2; ++i) dv[i] = dk[i] = 0.0f;

  mbarrier_wait(kv_full, 0);

  // Sᵀ = K_w·Q_iᵀ and dPᵀ = V_w·dO_iᵀ for the block's Q tile number n (buffer n % QB), once it
  // has landed: D/16 products each of 64×16 by 16×Br, K-major both (the sum runs along d,
  // along the rows of every tile), issued as two groups, not waited for.
  float s[Br / 2], dp[Br / 2];
  const auto issue_s_dp = [&](int n) {
    const int buf = n % QB;
    const uint8_t* Qs = smem + L::q + buf * L::Q_BYTES;
    const uint8_t* dOs = smem + L::d_o + buf * L::Q_BYTES;
    mbarrier_wait(&q_full[buf], (n / QB) & 1);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const int box = kk / 4, along = kk % 4 * 32;  // 16 columns are 32 bytes along a 128-byte row
      wgmma_ss<T, Br>(s, smem_desc(Ks + box * Bc * 128 + w * 64 * 128 + along, 16, 1024),
                      smem_desc(Qs + box * Br * 128 + along, 16, 1024), kk > 0);
    }
    wgmma_commit();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const int box = kk / 4, along = kk % 4 * 32;
      wgmma_ss<T, Br>(dp, smem_desc(Vs + box * Bc * 128 + w * 64 * 128 + along, 16, 1024),
                      smem_desc(dOs + box * Br * 128 + along, 16, 1024), kk > 0);
    }
    wgmma_commit();
  };

  for (int n = 0; n < q_tiles; ++n) {  // ---- the only loop: Q tiles ----
    const int i0 = tile_row(n);
    const int buf = n % QB;
    const uint8_t* Qs = smem + L::q + buf * L::Q_BYTES;
    const uint8_t* dOs = smem + L::d_o + buf * L::Q_BYTES;
    uint8_t* dSs = smem + L::ds + n % 2 * L::DS_BYTES;
    issue_s_dp(n);

    // Sᵀ and dPᵀ are in flight. This thread's queries' lse·log2e and D (kernel 1's workspace,
    // padded to whole tiles: no bounds to check) are read where they are first needed: with Q
    // tiles of 128 rows their 64 registers do not fit beside Sᵀ and dPᵀ (ptxas spills), so lse
    // after the first wait and D after the second; with 64 rows lse now, D after the first wait.
    // They come from shared memory, where the producer copied them with Q_i and dO_i: read from
    // global memory, each read after a wait cost a tile a memory latency, 12% of the time at
    // d = 64 (LOG.md; `--variant stats_global`, which reads them from L1, where the tile before
    // has prefetched them).
    float2 lse_q[Br / 8], D_q[Br / 8];
    const float* stats = reinterpret_cast<const float*>(smem + L::stats + buf * L::STATS_BYTES);
    const auto read = [&](float2(&v)[Br / 8], int which) {  // which: 0 lse, 1 D
#pragma unroll
      for (int nq = 0; nq < Br / 8; ++nq) {
        const int at = 8 * nq + 2 * t;
        if constexpr (L::STATS_SHARED) {
          v[nq] = ld_shared_f2(stats + which * Br + at);
        } else {
          v[nq] = *reinterpret_cast<const float2*>((which ? D_h : lse_h) + i0 + at);
        }
      }
    };
    if constexpr (Br == 128 && !L::STATS_SHARED) {
      if (n + 1 < q_tiles && lane < 8) prefetch_l1((lane < 4 ? lse_h : D_h) + tile_row(n + 1) + 32 * (lane % 4));
    }
    if constexpr (Br == 64) read(lse_q, 0);

    // Pᵀ, while dPᵀ is computed. Only a tile that crosses the diagonal or the end of the keys
    // is masked; queries past Nq need no mask: their lse is +inf (kernel 1's padding).
    wgmma_wait<1>();
    fence_registers(s);
    if constexpr (Br == 128) read(lse_q, 0);
    if constexpr (Br == 64) read(D_q, 1);
    const bool needs_mask = key_w + 64 > seq_kv || (causal && key_w + 63 > i0);
#pragma unroll
    for (int nq = 0; nq < Br / 8; ++nq) {
      const int q = i0 + 8 * nq + 2 * t;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = key_w + 16 * warp + g + 8 * (e / 2);
        float x = s[4 * nq + e];
        if (needs_mask && (key >= seq_kv || (causal && key > q + e % 2))) x = -INFINITY;
        s[4 * nq + e] = dev::fast_exp2<true>(fmaf(x, scale_log2, -(e % 2 ? lse_q[nq].x : lse_q[nq].y)));
      }
    }
    // dSᵀ = Pᵀ ∘ (dPᵀ − D).
    wgmma_wait<0>();
    fence_registers(dp);
    if constexpr (Br == 128) read(D_q, 1);
#pragma unroll
    for (int nq = 0; nq < Br / 8; ++nq) {
#pragma unroll
      for (int e = 0; e < 4; ++e) dp[4 * nq + e] = s[4 * nq + e] * (dp[4 * nq + e] - (e % 2 ? D_q[nq].y : D_q[nq].x));
    }

    // Pᵀ and dSᵀ rounded to T: two 8-column pieces of the accumulator are one A fragment
    // (k = 16 queries), as P was in stage 08's P·V.
    uint32_t pa[Br / 16][4], dsa[Br / 16][4];
#pragma unroll
    for (int kk = 0; kk < Br / 16; ++kk) {
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        pa[kk][r] = tc::pack2<T>(s[8 * kk + 2 * r], s[8 * kk + 2 * r + 1]);
        dsa[kk][r] = tc::pack2<T>(dp[8 * kk + 2 * r], dp[8 * kk + 2 * r + 1]);
      }
    }
    // dS into shared memory, transposed: element (query q, key k) of dS is at row q of box
    // k / 64, 16-byte chunk (k % 64 / 8) ^ (q % 8), place k % 8 (the 128-byte swizzle). The
    // values are dSᵀ's A fragments, so dK and dQ use the same rounded dS. The four registers
    // of k-step kk are four 8×8 matrices of dSᵀ: register m holds keys 16·warp + 8·(m % 2) +
    // 0..7 (rows) by queries 16kk + 8·(m / 2) + 0..7 (columns), in ldmatrix's layout.
    // stmatrix .trans stores each as 8 rows of dS, a query's 8 keys in one 16-byte chunk: one
    // instruction a k-step, where storing them one by one took 32 stores a thread a tile.
    {
      uint16_t* ds_tile = reinterpret_cast<uint16_t*>(dSs + w * Br * 128);  // this warpgroup's 64 keys: one box
      const int m = lane / 8, j = lane % 8;  // this lane names row j of matrix m
#pragma unroll
      for (int kk = 0; kk < Br / 16; ++kk) {
        // exercise 13-ds-store: give stmatrix_x4_trans this lane's row of dS (row j of matrix m: which query, and where its chunk of this warp's keys lies in the swizzled box) and the four registers of k-step kk
        //   stub: (void)ds_tile, (void)m, (void)j;
        const int q = 16 * kk + 8 * (m / 2) + j, chunk = (2 * warp + m % 2) ^ (q % 8);
        stmatrix_x4_trans(ds_tile + q * 64 + chunk * 8, dsa[kk]);
        // end exercise 13-ds-store
      }
    }
    fence_proxy_async();  // the tensor cores read what these stores wrote

    // dV_w += Pᵀ·dO_i and dK_w += dSᵀ·Q_i: Br/16 products each of 64×16 (registers) by
    // 16×D (MN-major: the sum runs down the rows of dO and Q). dV is issued now; dK now too
    // (d = 64) or after dQ (d = 128: L::DK_LATE), so that it runs while dQ is stored.
    fence_registers(dv);
    fence_registers(dk);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < Br / 16; ++kk) {  // rows 16kk .. 16kk + 15 of dO and Q; boxes Br·128 bytes apart
      wgmma_rs<T, D>(dv, pa[kk], smem_desc(dOs + kk * 16 * 128, Br * 128, 1024), true);
    }
    const auto issue_dk = [&](auto from, auto to) {  // k-steps from .. to − 1 (compile-time bounds)
#pragma unroll
      for (int kk = from; kk < to; ++kk) {
        wgmma_rs<T, D>(dk, dsa[kk], smem_desc(Qs + kk * 16 * 128, Br * 128, 1024), true);
      }
    };
    issue_dk(std::integral_constant<int, 0>{}, std::integral_constant<int, L::DK_EARLY>{});
    wgmma_commit();

    // This consumer's part of dQ_i = dS·K_j over all Bc keys (L::DQ_N: 64 rows from
    // dq_row0, L::DQ_N columns from dq_col0): both consumers' dS must be written.
    named_barrier_sync(1, CONSUMERS * WG);
    const int dq_row0 = Br == 128 ? 64 * w : 0, dq_col0 = Br == 128 ? 0 : D / 2 * w;
    float dq[L::DQ_N / 2];
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < Bc / 16; ++kk) {
      const int box = kk / 4, along = kk % 4 * 32;
      // K's keys 16kk .. 16kk + 15 from column dq_col0: d = 128, box w; d = 64, 64 bytes into
      // box 0's rows (half w) or the whole box (Br = 128).
      const uint8_t* kb = Ks + kk * 16 * 128 + (D == 128 ? w * Bc * 128 : dq_col0 * 2);
      wgmma_ss<T, L::DQ_N, true>(dq, smem_desc(dSs + box * Br * 128 + dq_row0 * 128 + along, 16, 1024),
                                 smem_desc(kb, Bc * 128, 1024), kk > 0);
    }
    wgmma_commit();
    // Products retire in the order of their groups. The tile is done with Q_i and dO_i once
    // they all have: now, or (dK after dQ) at the end of the tile, when dK has run under dQ's
    // way to dQacc; here only dV and dQ are waited for.
    const auto done_with_tile = [&] {
      fence_registers(dv);
      fence_registers(dk);
      mbarrier_arrive(&q_empty[buf]);  // this thread is done with Q_i and dO_i
    };
    if constexpr (L::DK_LATE) {
      issue_dk(std::integral_constant<int, L::DK_EARLY>{}, std::integral_constant<int, Br / 16>{});
      wgmma_commit();
      wgmma_wait<1>();
      fence_registers(dq);
    } else {
      wgmma_wait<0>();
      fence_registers(dq);
      done_with_tile();
    }

    // dQacc_i += the tile's dQ (scale is applied by kernel 3): every K/V tile of the head adds
    // to the same rows, from other blocks, so the additions are atomic. Deterministic: in the
    // order of the K/V tiles, K/V tile j when the flag of this part of dQ_i reads j.
    const int q_valid = seq_q - i0 < Br ? seq_q - i0 : Br;  // rows of the tile inside the head
    // Deterministic: the flags of this Q tile's two parts (one a consumer), and this K/V tile's turn.
    const auto flag = [&](int half) { return tile_flag(i0, half); };
    const int turn = kv_turn;
    // Where this thread's 8-column group nc of its part of dQ starts in a row of dQacc. Swizzled
    // (tuning.h's dq_swizzle), row q keeps its group c at c XOR (q % 8), and this thread's rows
    // are g (mod 8): so one store instruction's eight rows, 4·D bytes apart (a multiple of the
    // 128 bytes the 32 banks span), write four different 32-byte places of those 128 bytes, two
    // rows to each, not all eight to one (kernel 3 reads them back in order).
    const auto column = [&](int nc) { return S::dq_swizzle ? 8 * ((dq_col0 / 8 + nc) ^ g) : dq_col0 + 8 * nc; };
    // With the bulk reduction: both parts into shared memory buffer n % DQB, laid out as dQacc's
    // rows are, and fenced (the copy engine reads it through the async proxy).
    float* dq_tile = reinterpret_cast<float*>(smem + L::dq + n % L::DQB * L::DQ_BYTES);
    const auto store_dq_tile = [&] {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float* row = dq_tile + (dq_row0 + 16 * warp + g + 8 * r) * D + 2 * t;
#pragma unroll
        for (int nc = 0; nc < L::DQ_N / 8; ++nc) {
          st_shared_f2(row + column(nc), make_float2(dq[4 * nc + 2 * r], dq[4 * nc + 2 * r + 1]));
        }
      }
      fence_proxy_async();
    };
    if constexpr (L::DQ == DqAdd::bulk && L::ISSUER == DqIssuer::dq_warp) {
      // For the dQ warp's reduction. Buffer n % DQB: wait until the reduction of tile n − DQB
      // has read it; then only arrive, so that the reduction (and, deterministic, its turn) is
      // off this path.
      if (n >= L::DQB) named_barrier_sync(BAR_DQ_EMPTY + n % L::DQB, DQ_PARTIES);
      store_dq_tile();
      named_barrier_arrive(BAR_DQ_FULL + n % L::DQB, DQ_PARTIES);
    } else if constexpr (L::DQ == DqAdd::bulk) {
      // Then one thread adds the tile's rows with one bulk reduction. Buffer n % DQB: the
      // reduction DQB tiles ago has read it, since the adding thread waits for that before
      // the next tile's first barrier.
      store_dq_tile();
      named_barrier_sync(2, CONSUMERS * WG);
      if (threadIdx.x == WG) {
        bulk_reduce_add(dq_rows + static_cast<int64_t>(i0) * D, dq_tile, static_cast<uint32_t>(q_valid * D * 4));
        bulk_commit();
        bulk_wait_read<L::DQB - 1>();  // the reduction that last read the next tile's buffer is done reading
      }
    } else {
      // Each thread adds its accumulators: fp32 atomics in L2, two neighbouring floats each.
      // Deterministic: one thread of the warpgroup waits for the turn of its half of d, a
      // barrier of the warpgroup lets the others add, and after a second one it passes the turn on.
      // exercise 13-turn: the deterministic mode's handover, two lambdas: wait_turn() before the additions (one thread waits until flag(w) reads `turn`, then named barrier 3 + w lets the warpgroup's 128 threads add) and pass_turn() after them (once all 128 have added, flag(w) gets turn + 1; warps 1-3 need not wait for that); both do nothing unless S::deterministic
      //   stub: const auto wait_turn = [] {};
      //   stub: const auto pass_turn = [] {};
      const auto wait_turn = [&] {
        if constexpr (S::deterministic) {
          if (threadIdx.x % WG == 0) flag_wait(flag(w), turn);
          named_barrier_sync(3 + w, WG);
        }
      };
      const auto pass_turn = [&] {
        if constexpr (S::deterministic) {
          // Warp 0 waits for the others' additions and its first thread passes the turn on;
          // warps 1-3 go on at once. (A barrier instruction counts whole warps: the lanes of a
          // warp must all sync or all arrive.)
          if (warp == 0) {
            named_barrier_sync(3 + w, WG);
            if (lane == 0) flag_release(flag(w), turn + 1);
          } else {
            named_barrier_arrive(3 + w, WG);
          }
        }
      };
      // end exercise 13-turn
      wait_turn();
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int q = dq_row0 + 16 * warp + g + 8 * r;
        if (q >= q_valid) continue;
        float* row = dq_rows + static_cast<int64_t>(i0 + q) * D + 2 * t;
#pragma unroll
        for (int nc = 0; nc < L::DQ_N / 8; ++nc) {
          const float add[2] = {dq[4 * nc + 2 * r], dq[4 * nc + 2 * r + 1]};
          dev::atomic_add_vec<2, true>(row + column(nc), add);
        }
      }
      pass_turn();
    }
    if constexpr (L::DK_LATE) {
      wgmma_wait<0>();
      done_with_tile();
    }
  }
  if constexpr (L::DQ == DqAdd::bulk && L::ISSUER == DqIssuer::consumer) {
    if (threadIdx.x == WG) bulk_wait<0>();  // the reductions are done before the block ends
  }

  // A block cut in two (pc.slot >= 0, the grid's last round): its two parts meet in the
  // workspace. The first to get here leaves its sums there, in fp32, and is done; the second
  // adds them to its own and writes the block's dK and dV. Which comes second changes no bit
  // (a + b = b + a). The second waits only for a part that has already counted itself, so the
  // wait ends.
  if (!S::deterministic && pc.slot >= 0) {
    const int ct = threadIdx.x - WG;  // this consumer thread, 0 .. 255
    // The block's sums: for each group x of four (dV's D/8, then dK's), the 256 threads' float4s in turn.
    float4* sums = reinterpret_cast<float4*>(partials) + static_cast<int64_t>(pc.slot) * (D / 4) * CONSUMERS * WG;
    if (ct == 0) *role = atomicAdd(&meet[2 * pc.slot], 1);  // 0: the first part here
    named_barrier_sync(BAR_MEET, CONSUMERS * WG);
    if (*role == 0) {
#pragma unroll
      for (int x = 0; x < D / 4; ++x) {
        const float* v = x < D / 8 ? dv + 4 * x : dk + 4 * (x - D / 8);
        sums[x * CONSUMERS * WG + ct] = make_float4(v[0], v[1], v[2], v[3]);
      }
      named_barrier_sync(BAR_MEET, CONSUMERS * WG);            // every thread's sums are written ...
      if (ct == 0) flag_release(&meet[2 * pc.slot + 1], 1);  // ... before the flag says so
      return;                                                 // the other part writes the block
    }
    if (ct == 0) flag_wait(&meet[2 * pc.slot + 1], 1);
    named_barrier_sync(BAR_MEET, CONSUMERS * WG);
#pragma unroll
    for (int x = 0; x < D / 4; ++x) {
      float* v = x < D / 8 ? dv + 4 * x : dk + 4 * (x - D / 8);
      const float4 o = __ldcg(&sums[x * CONSUMERS * WG + ct]);  // from L2: another multiprocessor wrote it
      v[0] += o.x;
      v[1] += o.y;
      v[2] += o.z;
      v[3] += o.w;
    }
  }

  // The only writes of dV_w and dK_w, rounded to T: rows past Nkv are not written.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = key_w + 16 * warp + g + 8 * r;
    if (key >= seq_kv) continue;
    const int64_t at = (static_cast<int64_t>(bh) * seq_kv + key) * D + 2 * t;
#pragma unroll
    for (int nc = 0; nc < D / 8; ++nc) {
      *reinterpret_cast<uint32_t*>(dV + at + 8 * nc) = tc::pack2<T>(dv[4 * nc + 2 * r], dv[4 * nc + 2 * r + 1]);
      *reinterpret_cast<uint32_t*>(dK + at + 8 * nc) =
          tc::pack2<T>(scale * dk[4 * nc + 2 * r], scale * dk[4 * nc + 2 * r + 1]);
    }
  }
}

namespace {

using tc_backward::Workspace;

/// The tensor map of kernel 1's lse2 or Dvec at `base`: [B·H][padded_seq_q(p)] floats, read in
/// boxes of `rows` floats of one head (the padding holds whole Q tiles: no box leaves the head).
CUtensorMap stats_map(const float* base, const AttentionProblem& p, int rows) {
  const auto n = static_cast<cuuint64_t>(tc_backward::padded_seq_q(p)), bh = static_cast<cuuint64_t>(p.batch_heads());
  const cuuint64_t dims[3] = {n, bh, 1};
  const cuuint64_t strides[2] = {n * 4, n * bh * 4};  // bytes, multiples of 16 (n: whole tiles of 128 rows)
  const cuuint32_t box[3] = {static_cast<cuuint32_t>(rows), 1, 1};
  const cuuint32_t step[3] = {1, 1, 1};
  CUtensorMap map;
  const CUresult rc = hopper::tensor_map_encoder()(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 3, const_cast<float*>(base),
                                                  dims, strides, box, step, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                                  CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (rc != CUDA_SUCCESS) throw CudaError("stage 13: cuTensorMapEncodeTiled failed for lse or D (CUresult " + std::to_string(rc) + ")");
  return map;
}

template <typename T, int D, class S>
void launch(const AttentionProblem& p, const Tensors& t, void* workspace, const Layout& layout) {
  if (p.seq_q > 2147483647 - tc_backward::PAD_ROWS || p.seq_kv > 2147483647 - Bc) {
    throw InputError("stage 13: sequences too long");
  }
  require_copyable(p, layout, "stage 13");
  if (reinterpret_cast<uintptr_t>(workspace) % 16 != 0) {
    throw InputError("stage 13: the workspace must be 16-byte aligned (TMA copies lse and D from it)");
  }
  const int64_t kv_blocks = block_count(p);
  if (kv_blocks > 0x7fffffff) {
    throw InputError("stage 13: the grid would exceed 2^31 - 1 blocks; use fewer heads or shorter sequences");
  }
  const CUtensorMap tq = tensor_map_4d<T>(t.q, p, p.seq_q, layout.q, Smem<D, S>::BR, "stage 13");
  const CUtensorMap tk = tensor_map_4d<T>(t.k, p, p.seq_kv, layout.k, Bc, "stage 13");
  const CUtensorMap tv = tensor_map_4d<T>(t.v, p, p.seq_kv, layout.v, Bc, "stage 13");
  const CUtensorMap tdo = tensor_map_4d<T>(t.d_o, p, p.seq_q, layout.d_o, Smem<D, S>::BR, "stage 13");

  const Workspace ws = tc_backward::split_workspace(p, workspace);
  const CUtensorMap tlse = stats_map(ws.lse2, p, Smem<D, S>::BR);
  const CUtensorMap tdvec = stats_map(ws.Dvec, p, Smem<D, S>::BR);
  tc_backward::prepare(p, t, layout, ws, "stage 13");
  unsigned char* after = static_cast<unsigned char*>(workspace) + tc_backward::workspace_bytes(p);
  int* flags = reinterpret_cast<int*>(after);
  if constexpr (S::deterministic) FA_CUDA_CHECK(cudaMemsetAsync(flags, 0, flag_count(p) * sizeof(int), fa::stream()));

  const int smem = Smem<D, S>::bytes;
  FA_CUDA_CHECK(cudaFuncSetAttribute(backward_kernel<T, D, S>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  int device = 0, sms = 0;
  FA_CUDA_CHECK(cudaGetDevice(&device));
  FA_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  // The last round of blocks cut in two (tuning.h: at which head dims).
  const TailSplit split =
      tail_split(p, static_cast<int>((p.seq_q + Smem<D, S>::BR - 1) / Smem<D, S>::BR),
                 S::tail_multiprocessors > 0 ? S::tail_multiprocessors : sms,
                 (D == 64 ? S::split_tail_d64 : S::split_tail_d128) && !S::deterministic);
  int* meet = reinterpret_cast<int*>(after + flag_bytes(p));
  float* partials = reinterpret_cast<float*>(meet + meet_ints(p));
  if (split.split > 0) FA_CUDA_CHECK(cudaMemsetAsync(meet, 0, 2 * split.split * sizeof(int), fa::stream()));
  backward_kernel<T, D, S><<<static_cast<unsigned>(split.whole + 2 * split.split), THREADS, smem, fa::stream()>>>(
      tq, tk, tv, tdo, tlse, tdvec, ws.lse2, ws.Dvec, ws.dQacc, static_cast<T*>(t.dk), static_cast<T*>(t.dv),
      S::deterministic ? flags : nullptr, static_cast<int>(p.heads), static_cast<int>(p.seq_q),
      static_cast<int>(p.seq_kv), static_cast<int>(tc_backward::padded_seq_q(p)), p.scale, p.scale * LOG2E, p.causal,
      tail_heads(p, sms, S::causal_tail_rounds), split, partials, meet);
  FA_CHECK_LAUNCH("backward_kernel");

  tc_backward::finish_dq(p, ws, t.dq, S::dq_swizzle);
}

/// Refuses what no stage-13 kernel runs, with a message: another head dim, or a GPU that is
/// not a Hopper.
void require_runnable(const AttentionProblem& p) {
  hopper::require_head_dim(p.dim, "stage 13");
  const std::string why = unavailable_reason();
  if (!why.empty()) throw NoGpuError(why);
}

/// A variant of tuning.h on the demo's tensors (contiguous).
template <class S>
void run_variant(const AttentionProblem& p, const BackwardTensors& t, void* workspace) {
  const Tensors tensors{t.q, t.k, t.v, t.o, t.d_o, t.lse, t.dq, t.dk, t.dv};
  tc::with_mma_type(p.dtype, "stage 13", [&](auto type) {
    using T = decltype(type);
    require_runnable(p);
    (p.dim == 64 ? launch<T, 64, S> : launch<T, 128, S>)(p, tensors, workspace, Layout::contiguous(p));
  });
}

}  // namespace

std::string unavailable_reason() {
  const std::string why = hopper::unavailable_reason();
  return why.empty() ? why : "stage 13 runs on stage 08's machinery: " + why;
}

int tail_heads(const AttentionProblem& p, int sms, int rounds) {
  const int64_t heads = p.batch_heads(), kv_tiles = (p.seq_kv + Bc - 1) / Bc;
  if (!p.causal || rounds <= 0) return 0;
  const int64_t want = std::max<int64_t>(2, (static_cast<int64_t>(rounds) * sms + kv_tiles - 1) / kv_tiles);
  return static_cast<int>(std::min(heads, want));
}

TailSplit tail_split(const AttentionProblem& p, int q_tiles, int sms, bool allowed) {
  const int64_t blocks = block_count(p), r = sms > 0 ? blocks % sms : 0;
  const TailSplit none{static_cast<int>(blocks), 0, 0};
  if (!allowed || p.causal || r == 0 || r > kMaxSplit || q_tiles < 2) return none;
  const int64_t turns = (r + (sms - r) - 1) / (sms - r);  // of small parts on an idle multiprocessor
  if (turns > 9) return none;  // the big part would be over 9/10 of a block: little to win
  const int64_t big = std::clamp<int64_t>((q_tiles * turns + (turns + 1) / 2) / (turns + 1), 1, q_tiles - 1);
  return {static_cast<int>(blocks - r), static_cast<int>(r), static_cast<int>(big)};
}

std::size_t shared_bytes(int64_t d) {
  hopper::require_head_dim(d, "stage 13");
  return d == 64 ? Smem<64, Tuned>::bytes : Smem<128, Tuned>::bytes;
}

int q_tile_rows(int64_t d) {
  hopper::require_head_dim(d, "stage 13");
  return d == 64 ? Smem<64, Tuned>::BR : Smem<128, Tuned>::BR;
}

std::size_t workspace_bytes(const AttentionProblem& p) {
  shared_bytes(p.dim);  // refuses another head dim, before anything is allocated
  return tc_backward::workspace_bytes(p) + flag_bytes(p) + meet_bytes(p);
}

double hbm_bytes_model(const AttentionProblem& p) { return tc_backward::hbm_bytes_model_for(p, Bc); }

void attention_backward_strided(const AttentionProblem& p, const Tensors& t, void* workspace, const Layout& layout) {
  tc::with_mma_type(p.dtype, "stage 13", [&](auto type) {
    using T = decltype(type);
    require_runnable(p);
    (p.dim == 64 ? launch<T, 64, Tuned> : launch<T, 128, Tuned>)(p, t, workspace, layout);
  });
}

void attention_backward(const AttentionProblem& p, const Tensors& t, void* workspace) {
  // Parenthesised: no argument-dependent lookup, which would also find stage 11's function of
  // the same name (Tensors is tc_backward's).
  (attention_backward_strided)(p, t, workspace, Layout::contiguous(p));
}

void attention_backward_deterministic(const AttentionProblem& p, const Tensors& t, void* workspace,
                                      const Layout& layout) {
  tc::with_mma_type(p.dtype, "stage 13", [&](auto type) {
    using T = decltype(type);
    require_runnable(p);
    (p.dim == 64 ? launch<T, 64, Deterministic> : launch<T, 128, Deterministic>)(p, t, workspace, layout);
  });
}

void attention_backward_deterministic_atomics(const AttentionProblem& p, const Tensors& t, void* workspace,
                                              const Layout& layout) {
  tc::with_mma_type(p.dtype, "stage 13", [&](auto type) {
    using T = decltype(type);
    require_runnable(p);
    (p.dim == 64 ? launch<T, 64, DeterministicAtomics> : launch<T, 128, DeterministicAtomics>)(p, t, workspace,
                                                                                               layout);
  });
}


}  // namespace fa::hopper_backward
