/**
 * \file tuning.h
 * \brief Stage 11's typed configuration: the choices the finished backward kernel makes,
 *        one per step of the stage's LOG.md, and the variants that each undo one of them.
 *
 * The main kernel (tensor_core_backward.cu) is a template on one of these structs. The
 * public header knows only the finished kernel; this file is for the kernel file, the tests
 * (which run every variant on the CPU backend) and `--variant`, with which the demo runs
 * any variant and benchmarks/tune_stage11.sh times them all from one build:
 *
 *     stage11_backward_tensor_cores --variant warp16    # 16 keys a warp, 64 a block
 */
#pragma once

#include <tuple>
#include <vector>

#include "common/backward_demo.h"
#include "stages/11_backward_tensor_cores/tensor_core_backward.h"

namespace fa::tc_backward {

/// The finished kernel. Each member is a step of LOG.md; a variant derives from this
/// struct and changes one member.
struct Tuned {
  static constexpr const char* name = "tuned";  ///< what --variant takes
  /// How the variant differs from the finished kernel, for --help.
  static constexpr const char* summary = "the finished kernel, as the demo runs it without --variant";
  static constexpr int bc = 0;          ///< keys a block; 0: the kernel's choice (128)
  static constexpr int key_mtiles = 0;  ///< 16-key m-tiles a warp; 0: the kernel's choice per head dim
  /// dK and dV split along d between two warps, Pᵀ and dSᵀ through shared memory: 2 on,
  /// 1 off, 0 the kernel's choice (on at d = 128).
  static constexpr int split_d = 0;
  static constexpr int min_blocks = 0;  ///< __launch_bounds__' blocks per SM; 0: the kernel's choice
  static constexpr int dq_mtiles = 0;   ///< 16-query m-tiles of dQ a warp; 0: the kernel's choice (2 where d allows)
  /// Buffers of a Q tile: 3 (one barrier a tile, dSᵀ in two buffers), 2, or 0, the kernel's
  /// choice (3 at d = 128, where a block has a multiprocessor to itself).
  static constexpr int q_buffers = 0;
};

// The variants LOG.md measures, each the finished kernel with one change.

/// The variant `Warp16` (see its summary).
struct Warp16 : Tuned {
  static constexpr const char* name = "warp16";  ///< --variant warp16
  /// For --help.
  static constexpr const char* summary = "16 keys a warp and 64 a block at every head dim (at d <= 64, the step before)";
  static constexpr int key_mtiles = 1;  ///< the change
  static constexpr int bc = 64;         ///< and the block size it had
  static constexpr int split_d = 1;     ///< and Pᵀ, dSᵀ in registers
};
/// The variant `NoSplit` (see its summary).
struct NoSplit : Tuned {
  static constexpr const char* name = "no_split";  ///< --variant no_split
  /// For --help.
  static constexpr const char* summary =
      "dK and dV not split along d: at d = 128, 16 keys a warp with Pt, dSt in registers (the step before)";
  static constexpr int split_d = 1;  ///< the change
};
/// The variant `DqOne` (see its summary).
struct DqOne : Tuned {
  static constexpr const char* name = "dq_mt1";  ///< --variant dq_mt1
  /// For --help.
  static constexpr const char* summary = "dQ: 16 queries a warp (one m-tile), all its columns (the step before)";
  static constexpr int dq_mtiles = 1;  ///< the change
};
/// The variant `Min3` (see its summary).
struct Min3 : Tuned {
  static constexpr const char* name = "min3";  ///< --variant min3
  /// For --help.
  static constexpr const char* summary = "__launch_bounds__ asks for 3 blocks per SM (registers capped at 168)";
  static constexpr int min_blocks = 3;  ///< the change
};

/// The variant `Qbuf2` (see its summary). It is also what the finished kernel runs at d = 128
/// on a GPU whose blocks cannot have the three buffers' 226 KiB of shared memory (the A100's
/// 163 KiB).
struct Qbuf2 : Tuned {
  static constexpr const char* name = "qbuf2";  ///< --variant qbuf2
  /// For --help.
  static constexpr const char* summary =
      "two Q-tile buffers and two barriers a tile at every head dim (the step before)";
  static constexpr int q_buffers = 2;  ///< the change
};

/// Every variant, in LOG.md's order, the finished kernel first.
using Variants = std::tuple<Tuned, Warp16, NoSplit, DqOne, Min3, Qbuf2>;

/// The variants as the demo runs them (`--variant NAME`); each runs d = 64 and 128.
std::vector<Variant<BackwardStageRun>> variants();

}  // namespace fa::tc_backward
