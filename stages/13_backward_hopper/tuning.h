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
 *     stage13_backward_hopper --variant atomics    # dQ by fp32 atomics from every thread, at d = 128 too
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
};

/// The finished kernel. A variant derives from this struct and changes one member.
struct Tuned {
  static constexpr const char* name = "tuned";  ///< what --variant takes
  /// How the variant differs from the finished kernel, for --help.
  static constexpr const char* summary = "the finished kernel, as the demo runs it without --variant";
  /// dQ's parts at d = 64: atomics; the bulk reduction was 0-2.4% slower there (LOG.md).
  static constexpr DqAdd dq_d64 = DqAdd::atomics;
  /// dQ's parts at d = 128: one bulk reduction a tile, 9-13% faster than atomics (LOG.md).
  static constexpr DqAdd dq_d128 = DqAdd::bulk;
};

/// The variant `Atomics` (see its summary).
struct Atomics : Tuned {
  static constexpr const char* name = "atomics";  ///< --variant atomics
  /// For --help.
  static constexpr const char* summary = "dQ added by fp32 atomics from every thread at d = 128 too (the step before)";
  static constexpr DqAdd dq_d128 = DqAdd::atomics;  ///< the change
};

/// The variant `Bulk` (see its summary).
struct Bulk : Tuned {
  static constexpr const char* name = "bulk";  ///< --variant bulk
  /// For --help.
  static constexpr const char* summary = "dQ added by one bulk reduction a tile at d = 64 too";
  static constexpr DqAdd dq_d64 = DqAdd::bulk;  ///< the change
};

/// Every variant, in LOG.md's order, the finished kernel first.
using Variants = std::tuple<Tuned, Atomics, Bulk>;

/// The variants as the demo runs them (`--variant NAME`).
std::vector<Variant<BackwardStageRun>> variants();

}  // namespace fa::hopper_backward
