/**
 * \file tuning.h
 * \brief Stage 10's typed configuration: the choices the finished backward kernel makes,
 *        one per step of the stage's LOG.md, and the variants that each undo one of them.
 *
 * The main kernel (backward_attention.cu) is a template on one of these structs. The
 * public header knows only the finished kernel; this file is for the kernel file, the tests
 * (which run every variant on the CPU backend) and `--variant`, with which the demo runs
 * any variant and benchmarks/tune_stage10.sh times them all from one build:
 *
 *     stage10_backward --variant late_load      # the next Q tile loaded after dQ
 */
#pragma once

#include <tuple>
#include <vector>

#include "common/demo.h"
#include "stages/10_backward/backward_attention.h"

namespace fa::backward {

/// The finished kernel. Each member is a step of LOG.md; a variant derives from this
/// struct and changes one or two members.
struct Tuned {
  static constexpr const char* name = "tuned";  ///< what --variant takes
  /// How the variant differs from the finished kernel, for --help.
  static constexpr const char* summary = "the finished kernel, as the demo runs it without --variant";
  static constexpr bool vector_atomics = true;  ///< dQ added 4 floats an atomic on compute capability 9.0 (else one)
  static constexpr bool cp_async = true;        ///< tiles copied by cp.async (else loaded into registers, then stored)
  static constexpr bool early_load = true;      ///< the next Q tile's copies start before dQ (else after it)
  static constexpr bool fast_exp = true;        ///< 2^x by ex2.approx.ftz (else exp2f, which keeps denormals)
};

// The variants LOG.md measures, each the finished kernel with one step undone.

/// The variant `Exp2f` (see its summary).
struct Exp2f : Tuned {
  static constexpr const char* name = "exp2f";  ///< --variant exp2f
  static constexpr const char* summary = "P by exp2f instead of ex2.approx.ftz";  ///< for --help
  static constexpr bool fast_exp = false;  ///< the change
};
/// The variant `LateLoad` (see its summary).
struct LateLoad : Tuned {
  static constexpr const char* name = "late_load";  ///< --variant late_load
  static constexpr const char* summary = "the next Q tile's copies start after dQ, not before";  ///< for --help
  static constexpr bool early_load = false;  ///< the change
};
/// The variant `NoCpAsync` (see its summary).
struct NoCpAsync : Tuned {
  static constexpr const char* name = "no_cp_async";  ///< --variant no_cp_async
  /// For --help.
  static constexpr const char* summary = "tiles loaded through registers, the next Q tile after dQ";
  static constexpr bool cp_async = false;    ///< the change
  static constexpr bool early_load = false;  ///< and the step that rests on it
};
/// The variant `ScalarAtomics` (see its summary).
struct ScalarAtomics : Tuned {
  static constexpr const char* name = "scalar_atomics";  ///< --variant scalar_atomics
  static constexpr const char* summary = "dQ added one float an atomic";  ///< for --help
  static constexpr bool vector_atomics = false;  ///< the change
};

/// Every variant, in LOG.md's order, the finished kernel first.
using Variants = std::tuple<Tuned, Exp2f, LateLoad, NoCpAsync, ScalarAtomics>;

/// Runs one backward pass: the problem, the tensors and the workspace, as attention_backward.
using BackwardRun = void (*)(const AttentionProblem&, const Tensors&, void*);

/// The variants as the demo runs them (`--variant NAME`); each runs d = 64 and 128.
std::vector<Variant<BackwardRun>> variants();

}  // namespace fa::backward
