/**
 * \file tuning.h
 * \brief Stage 07's typed configuration: the choices the finished kernel makes, one per
 *        step of the stage's LOG.md, and the variants that each undo one of them.
 *
 * The kernel (pipelined_attention.cu) is a template on one of these structs. The public
 * header knows only the finished kernel; this file is for the kernel file, the tests
 * (which run every variant on the CPU backend) and `--variant`, with which the demo runs
 * any variant and benchmarks/tune_stage07.sh times them all from one build:
 *
 *     stage07_memory_pipeline --variant no_swizzle      # the tiles unswizzled
 */
#pragma once

#include <tuple>
#include <vector>

#include "common/demo.h"
#include "stages/07_memory_pipeline/pipelined_attention.h"

namespace fa::pipeline {

/// Where a row's running max moves lazily (only when it grows by more than 2^8).
enum class Lazy { never, at_d128, always };

/// The finished kernel. Each member is a step of LOG.md; a variant derives from this
/// struct and changes one member.
struct Tuned {
  static constexpr const char* name = "tuned";  ///< what --variant takes
  /// How the variant differs from the finished kernel, for --help.
  static constexpr const char* summary = "the finished kernel, as the demo runs it without --variant";
  static constexpr int br = Br;                 ///< query rows per tile
  static constexpr int m_tiles = 2;             ///< 16-row m-tiles per warp: br / (16·m_tiles) warps a block
  static constexpr int bc = 0;                  ///< Bc at every head dim; 0: the kernel's choice per head dim
  static constexpr bool prefetch = true;        ///< copy K/V tile j+1 while tile j is computed
  static constexpr bool swizzle = true;         ///< XOR-swizzled tiles (else plain rows, bank conflicts and all)
  static constexpr bool lane_offsets = true;    ///< swizzled offsets computed once per lane (else at every access)
  static constexpr bool two_phase = true;       ///< mask arithmetic only on the tiles that need it
  static constexpr bool heavy_first = true;     ///< each head's last (causally heaviest) Q tile first
  static constexpr bool fast_exp = true;        ///< 2^x by ex2.approx (else exp2f)
  static constexpr Lazy lazy = Lazy::at_d128;   ///< where a row's max moves lazily
  static constexpr int min_blocks = 0;          ///< __launch_bounds__' blocks per SM; 0: the kernel's choice
};

// The variants LOG.md measures, each the finished kernel with one change.

/// The variant `NoPrefetch` (see its summary).
struct NoPrefetch : Tuned {
  static constexpr const char* name = "no_prefetch";  ///< --variant no_prefetch
  static constexpr const char* summary = "copy each K/V tile, wait for it, then compute (no overlap)";  ///< for --help
  static constexpr bool prefetch = false;  ///< the change
};
/// The variant `NoSwizzle` (see its summary).
struct NoSwizzle : Tuned {
  static constexpr const char* name = "no_swizzle";  ///< --variant no_swizzle
  static constexpr const char* summary = "tiles in plain rows: ldmatrix meets bank conflicts";  ///< for --help
  static constexpr bool swizzle = false;  ///< the change
};
/// The variant `PerAccess` (see its summary).
struct PerAccess : Tuned {
  static constexpr const char* name = "per_access";  ///< --variant per_access
  static constexpr const char* summary = "the swizzled offsets computed at every copy and ldmatrix";  ///< for --help
  static constexpr bool lane_offsets = false;  ///< the change
};
/// The variant `MaskAll` (see its summary).
struct MaskAll : Tuned {
  static constexpr const char* name = "mask_all";  ///< --variant mask_all
  static constexpr const char* summary = "the mask arithmetic on every tile, not only on those that need it";  ///< for --help
  static constexpr bool two_phase = false;  ///< the change
};
/// The variant `Exp2f` (see its summary).
struct Exp2f : Tuned {
  static constexpr const char* name = "exp2f";  ///< --variant exp2f
  static constexpr const char* summary = "2^x by exp2f, with its range handling, instead of ex2.approx";  ///< for --help
  static constexpr bool fast_exp = false;  ///< the change
};
/// The variant `FirstFirst` (see its summary).
struct FirstFirst : Tuned {
  static constexpr const char* name = "first_first";  ///< --variant first_first
  static constexpr const char* summary = "each head's first Q tile first";  ///< for --help
  static constexpr bool heavy_first = false;  ///< the change
};
/// The variant `Eager` (see its summary).
struct Eager : Tuned {
  static constexpr const char* name = "eager";  ///< --variant eager
  static constexpr const char* summary = "a row's max moves at every new max, at every head dim";  ///< for --help
  static constexpr Lazy lazy = Lazy::never;  ///< the change
};
/// The variant `LazyAll` (see its summary).
struct LazyAll : Tuned {
  static constexpr const char* name = "lazy_all";  ///< --variant lazy_all
  static constexpr const char* summary = "lazy rescaling at every head dim, not only at d = 128";  ///< for --help
  static constexpr Lazy lazy = Lazy::always;  ///< the change
};
/// The variant `OneMTile` (see its summary).
struct OneMTile : Tuned {
  static constexpr const char* name = "one_mtile";  ///< --variant one_mtile
  static constexpr const char* summary = "one 16-row m-tile per warp (Br = 64)";  ///< for --help
  static constexpr int br = 64;  ///< the change
  static constexpr int m_tiles = 1;  ///< the change
};
/// The variant `Bc64` (see its summary).
struct Bc64 : Tuned {
  static constexpr const char* name = "bc64";  ///< --variant bc64
  static constexpr const char* summary = "Bc = 64 at every head dim";  ///< for --help
  static constexpr int bc = 64;  ///< the change
};
/// The variant `Bc128` (see its summary).
struct Bc128 : Tuned {
  static constexpr const char* name = "bc128";  ///< --variant bc128
  static constexpr const char* summary = "Bc = 128 at every head dim";  ///< for --help
  static constexpr int bc = 128;  ///< the change
};
/// The variant `MinBlocks1` (see its summary).
struct MinBlocks1 : Tuned {
  static constexpr const char* name = "min1";  ///< --variant min1
  static constexpr const char* summary = "__launch_bounds__ asks for 1 block per SM: the compiler may use more registers";  ///< for --help
  static constexpr int min_blocks = 1;  ///< the change
};
/// Every variant, in LOG.md's order, the finished kernel first.
using Variants = std::tuple<Tuned, NoPrefetch, NoSwizzle, PerAccess, MaskAll, Exp2f, FirstFirst, Eager, LazyAll,
                            OneMTile, Bc64, Bc128, MinBlocks1>;

/// The variants as the demo driver runs them (`--variant NAME`); each runs d = 64 and 128.
std::vector<StageVariant> variants();

}  // namespace fa::pipeline
