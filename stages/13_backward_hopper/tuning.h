/**
 * \file tuning.h
 * \brief Stage 13's typed configuration: the choice the finished backward kernel makes, per
 *        head dim, for how dQ's parts reach the fp32 accumulator, and the variants that
 *        make the other choice.
 *
 * The main kernel (hopper_backward.cu) is a template on one of these structs. The public
 * header knows only the finished kernel; this file is for the kernel file, the tests (which
 * run every variant) and `--variant`:
 *
 *     stage13_backward_hopper --variant atomics        # dQ by fp32 atomics from every thread
 *     stage13_backward_hopper --variant bulk           # the bulk reduction issued by a consumer, at d = 64 too
 *     stage13_backward_hopper --variant deterministic  # dQ's additions in a fixed order
 *     stage13_backward_hopper --variant deterministic_atomics  # deterministic, dQ by atomics at d = 64
 *     stage13_backward_hopper --variant dq_warp        # the bulk reduction issued by a warp of its own, at d = 128 too
 *     stage13_backward_hopper --variant q64            # Q tiles of 64 rows at d = 64 too
 *     stage13_backward_hopper --variant dk_first       # d = 128: dK issued beside dV, before dQ
 *     stage13_backward_hopper --variant dk_last        # d = 64: dK issued after dQ
 *     stage13_backward_hopper --variant dk_split       # half of dK before the barrier, half after dQ
 *     stage13_backward_hopper --variant dq_plain       # dQ's tile stored without the swizzle
 *     stage13_backward_hopper --variant head_order     # causal: the blocks dealt head by head to the end
 *     stage13_backward_hopper --variant whole_blocks   # no block cut in two at the grid's end
 *     stage13_backward_hopper --variant tail3          # the last round cut as for 3 multiprocessors
 *     stage13_backward_hopper --variant stats_global   # lse and D read from global memory, not shared
 */
#pragma once

#include <tuple>
#include <vector>

#include "common/backward_demo.h"
#include "stages/13_backward_hopper/hopper_backward.h"

namespace fa::hopper_backward {

/// How a tile's dQ part is added into the fp32 accumulator dQacc.
enum class DqAdd {
  atomics,  ///< each thread adds its accumulators, two floats an atomic (stage 11's way)
  bulk,     ///< the tile goes to shared memory, and one thread adds it with one bulk reduction
            ///< (which thread: DqIssuer)
};

/// Who issues a tile's bulk reduction (DqAdd::bulk).
enum class DqIssuer {
  consumer,  ///< one consumer thread, after a named barrier of both consumers (sync: they wait)
  dq_warp,   ///< a warp of the producer warpgroup, which the consumers only tell (arrive: they go on)
};

/// When dK += dSᵀ·Q_i is issued, against the tile's other products.
enum class DkOrder {
  with_dv,   ///< beside dV, before the barrier; the tile waits for all three products before dQ's store
  split,     ///< its first half of k-steps beside dV, the second after dQ (and dQ's store waits for dV and dQ)
  after_dq,  ///< after dQ, in a group of its own: dQ's store waits for dV and dQ, and dK runs under it
};

/// Where a consumer reads a Q tile's lse and D (kernel 1's workspace) from.
enum class Stats {
  global,  ///< each thread from global memory (Br = 128: from L1, where the tile before prefetched them)
  shared,  ///< from shared memory, where the producer copied them by TMA beside Q_i and dO_i
};

/// The finished kernel. A variant derives from this struct and changes one choice.
struct Tuned {
  static constexpr const char* name = "tuned";  ///< what --variant takes
  /// How the variant differs from the finished kernel, for --help.
  static constexpr const char* summary = "the finished kernel, as the demo runs it without --variant";
  /// dQ's parts at d = 64: one bulk reduction a tile, issued by the dQ warp (below): 2.5-3%
  /// faster than atomics once dS went through stmatrix (LOG.md).
  static constexpr DqAdd dq_d64 = DqAdd::bulk;
  /// dQ's parts at d = 128: one bulk reduction a tile, 9-13% faster than atomics (LOG.md).
  static constexpr DqAdd dq_d128 = DqAdd::bulk;
  /// At d = 64 the bulk reduction is issued by the dQ warp, which the consumers only tell.
  static constexpr DqIssuer dq_issuer_d64 = DqIssuer::dq_warp;
  /// At d = 128 by a consumer thread: issued by the dQ warp it was 0.9-1.7% slower (LOG.md).
  static constexpr DqIssuer dq_issuer_d128 = DqIssuer::consumer;
  /// Query rows of a Q tile at d = 64: 128, 10-13% faster than 64 (LOG.md). (d = 128 takes 64:
  /// dK and dV hold 128 registers a thread there, and Sᵀ, dPᵀ of 128 queries would need 128 more.)
  static constexpr int br_d64 = 128;
  /// dQ's additions in any order (blocks add as they finish a tile): dQ's last bits vary from
  /// run to run. The deterministic variant orders them, at a cost LOG.md measures.
  static constexpr bool deterministic = false;
  /// At d = 64, dK += dSᵀ·Q_i is issued beside dV's product, before the barrier, and the tile
  /// waits for all three products before dQ's store: issued after dQ it was 1-2.5% slower.
  static constexpr DkOrder dk_d64 = DkOrder::with_dv;
  /// At d = 128 it is issued after dQ's product: the tile waits for dV and dQ only, and dK
  /// runs while dQ goes to shared memory and dQacc: 4.5-6% faster, 1.5-4.5% causal (LOG.md).
  static constexpr DkOrder dk_d128 = DkOrder::after_dq;
  /// dQ's rows in dQacc (and in the tile the bulk reduction reads) with their 8-column groups
  /// swizzled, so that the stores of a dQ tile into shared memory meet no bank conflicts.
  static constexpr bool dq_swizzle = true;
  /// Under the causal mask the last heads' blocks are dealt K/V tile by K/V tile, enough of
  /// them for this many blocks a multiprocessor (block_coords(), tail_heads()), so that the
  /// grid ends on light blocks (0: head by head to the end). 2: 2-3% less time at d = 64
  /// causal, 6-7% at d = 128; 4 and 8 were no better (LOG.md).
  static constexpr int causal_tail_rounds = 2;
  /// Without the mask, the blocks of the grid's last round cut in two along their Q tiles
  /// (tail_split()), so that they end with the other multiprocessors busy: at d = 128 the
  /// bar's 1,024 blocks are 7.76 rounds and took as long as 8; cut, 0.3-4.5% less time there,
  /// and 1.5x less with 64 blocks (LOG.md: "The grid's last round").
  static constexpr bool split_tail_d128 = true;
  /// The same at d = 64: 1.0-1.4% less time than whole blocks at the bar's shape (LOG.md).
  static constexpr bool split_tail_d64 = true;
  /// The multiprocessors tail_split() plans for: 0, the GPU's own (a test's variant sets 3, so
  /// that the CPU backend, which has one, cuts blocks).
  static constexpr int tail_multiprocessors = 0;
  /// lse and D come with Q_i and dO_i, by TMA into shared memory: 12-13% less time at d = 64,
  /// 11-12% causal, 4-7% at d = 128 than each thread reading them from global memory after
  /// each wait, and at d = 64 within 1-4% of a copy that reads neither (LOG.md).
  static constexpr Stats stats = Stats::shared;
};

/// The variant `Atomics` (see its summary).
struct Atomics : Tuned {
  static constexpr const char* name = "atomics";  ///< --variant atomics
  /// For --help.
  static constexpr const char* summary =
      "dQ added by fp32 atomics from every thread at both head dims (the step before)";
  static constexpr DqAdd dq_d64 = DqAdd::atomics;   ///< the change
  static constexpr DqAdd dq_d128 = DqAdd::atomics;  ///< the change
};

/// The variant `Bulk` (see its summary).
struct Bulk : Tuned {
  static constexpr const char* name = "bulk";  ///< --variant bulk
  /// For --help.
  static constexpr const char* summary = "the bulk reduction issued by a consumer thread at d = 64 too";
  static constexpr DqIssuer dq_issuer_d64 = DqIssuer::consumer;  ///< the change
};

/// The variant `Deterministic` (see its summary): the same kernel with dQ reproducible bit
/// for bit, which attention_backward(..., deterministic = true) runs. Its dQ is added by the
/// bulk reduction at both head dims, issued by the dQ warp, which waits for the turns where
/// the consumers do not: 1.11-1.42× the finished kernel's time (1.13-1.33× before lse and D came
/// by TMA, 1.10-1.31× before dQ's tile was swizzled, 1.07-1.20× before the Q tiles of 128 rows
/// at d = 64), where the atomics' handover, a barrier on each side, took 1.37-1.48× at d = 64
/// (LOG.md).
struct Deterministic : Tuned {
  static constexpr const char* name = "deterministic";  ///< --variant deterministic
  /// For --help.
  static constexpr const char* summary =
      "dQ's additions in a fixed order (K/V tile by K/V tile, a flag per Q tile): the same bits every run";
  static constexpr bool deterministic = true;  ///< the change
  /// Its bulk reductions issued by the dQ warp at d = 128 too: 7-15% faster than a consumer
  /// thread's handover (LOG.md).
  static constexpr DqIssuer dq_issuer_d128 = DqIssuer::dq_warp;
};
/// The variant `DeterministicAtomics` (see its summary).
struct DeterministicAtomics : Deterministic {
  static constexpr const char* name = "deterministic_atomics";  ///< --variant deterministic_atomics
  /// For --help.
  static constexpr const char* summary =
      "deterministic, with dQ by atomics at d = 64, a barrier on each side of the turn (the step before)";
  static constexpr DqAdd dq_d64 = DqAdd::atomics;  ///< the change
};
/// The variant `DqWarp` (see its summary): the bulk reductions issued as the deterministic
/// mode issues them, at both head dims.
struct DqWarp : Tuned {
  static constexpr const char* name = "dq_warp";  ///< --variant dq_warp
  /// For --help.
  static constexpr const char* summary =
      "the bulk reduction issued by a warp of the producer warpgroup, which the consumers only tell, at d = 128 too";
  static constexpr DqIssuer dq_issuer_d128 = DqIssuer::dq_warp;  ///< the change
};

/// The variant `Q64` (see its summary).
struct Q64 : Tuned {
  static constexpr const char* name = "q64";  ///< --variant q64
  /// For --help.
  static constexpr const char* summary =
      "Q tiles of 64 rows at d = 64 too, each consumer's dQ all 64 rows × half of d (the step before)";
  static constexpr int br_d64 = 64;  ///< the change
};

/// The variant `DkFirst` (see its summary).
struct DkFirst : Tuned {
  static constexpr const char* name = "dk_first";  ///< --variant dk_first
  /// For --help.
  static constexpr const char* summary =
      "d = 128: dK issued beside dV, all three products waited for before dQ's store (the step before)";
  static constexpr DkOrder dk_d128 = DkOrder::with_dv;  ///< the change
};
/// The variant `DkLast` (see its summary).
struct DkLast : Tuned {
  static constexpr const char* name = "dk_last";  ///< --variant dk_last
  /// For --help.
  static constexpr const char* summary = "d = 64: dK issued after dQ, as at d = 128, running while dQ is stored";
  static constexpr DkOrder dk_d64 = DkOrder::after_dq;  ///< the change
};
/// The variant `DkSplit` (see its summary).
struct DkSplit : Tuned {
  static constexpr const char* name = "dk_split";  ///< --variant dk_split
  /// For --help.
  static constexpr const char* summary =
      "dK's first half of k-steps issued beside dV, before the barrier, the second after dQ, at both head dims";
  static constexpr DkOrder dk_d64 = DkOrder::split;   ///< the change
  static constexpr DkOrder dk_d128 = DkOrder::split;  ///< the change
};

/// The variant `DqPlain` (see its summary).
struct DqPlain : Tuned {
  static constexpr const char* name = "dq_plain";  ///< --variant dq_plain
  /// For --help.
  static constexpr const char* summary =
      "dQ's rows stored in order: a store instruction's eight rows meet in the same banks (the step before)";
  static constexpr bool dq_swizzle = false;  ///< the change
};

/// The variant `HeadOrder` (see its summary).
struct HeadOrder : Tuned {
  static constexpr const char* name = "head_order";  ///< --variant head_order
  /// For --help.
  static constexpr const char* summary = "causal: the blocks dealt head by head to the end (the step before)";
  static constexpr int causal_tail_rounds = 0;  ///< the change
};
/// The variant `WholeBlocks` (see its summary).
struct WholeBlocks : Tuned {
  static constexpr const char* name = "whole_blocks";  ///< --variant whole_blocks
  /// For --help.
  static constexpr const char* summary = "no block cut in two: the grid's last round part-filled (the step before)";
  static constexpr bool split_tail_d64 = false;   ///< the change
  static constexpr bool split_tail_d128 = false;  ///< the change
};
/// The variant `StatsGlobal` (see its summary).
struct StatsGlobal : Tuned {
  static constexpr const char* name = "stats_global";  ///< --variant stats_global
  /// For --help.
  static constexpr const char* summary =
      "lse and D read by each thread from global memory after the products' waits (the step before, "
      "with this kernel's one dQ buffer at d = 64 and dQ's stores by st.shared)";
  static constexpr Stats stats = Stats::global;  ///< the change
};

/// The variant `Tail3` (see its summary): for the tests, not a step of LOG.md.
struct Tail3 : Tuned {
  static constexpr const char* name = "tail3";  ///< --variant tail3
  /// For --help.
  static constexpr const char* summary =
      "the last round cut as on a GPU of 3 multiprocessors (for the tests: the CPU backend has one)";
  static constexpr int tail_multiprocessors = 3;  ///< the change
};

/// Every variant, in LOG.md's order, the finished kernel first.
using Variants = std::tuple<Tuned, Atomics, Bulk, Deterministic, DeterministicAtomics, DqWarp, Q64, DkFirst, DkLast, DkSplit,
                            DqPlain, HeadOrder, WholeBlocks, StatsGlobal, Tail3>;

/// The variants as the demo runs them (`--variant NAME`).
std::vector<Variant<BackwardStageRun>> variants();

}  // namespace fa::hopper_backward
