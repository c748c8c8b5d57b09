/**
 * \file tuning.h
 * \brief Stage 08's typed configuration: the choices the finished kernel makes, one per
 *        step of the stage's LOG.md, and the variants that each undo or change one of them.
 *
 * The kernel (hopper_attention.cu) is a template on one of these structs. The public header
 * knows only the finished kernel; this file is for the kernel file, the tests (which run
 * every variant on the CPU backend's Hopper emulation) and `--variant`, with which the demo
 * runs any variant and benchmarks/tune_stage08.sh times them all from one build:
 *
 *     stage08_hopper --variant no_overlap --dim 128      # each product waited for at once
 */
#pragma once

#include <tuple>
#include <vector>

#include "common/demo.h"
#include "stages/08_hopper/hopper_attention.h"

namespace fa::hopper {

/// How blocks take Q tiles.
enum class Schedule {
  tile_per_block,  ///< a block for each Q tile
  persistent,      ///< one block a multiprocessor, taking tile after tile
  by_shape,        ///< persistent at d = 64, and at d = 128 up to Nkv = 8192 (persistent())
};

/// Where a row's running max moves lazily (only when it grows by more than 2^8).
enum class Lazy { never, at_d128, always };

/// The finished kernel. Each member is a step of LOG.md; a variant derives from this
/// struct and changes one member.
struct Tuned {
  static constexpr const char* name = "tuned";  ///< what --variant takes
  /// How the variant differs from the finished kernel, for --help.
  static constexpr const char* summary = "the finished kernel, as the demo runs it without --variant";
  static constexpr int stages = 3;                        ///< K/V tiles in flight: the ring's slots
  static constexpr bool overlap = true;                   ///< softmax of tile j+1 while P_j·V_j runs
  static constexpr bool pingpong = true;                  ///< with overlap: the consumers take turns at the tensor cores
  static constexpr int consumers_d64 = 2;                 ///< consumer warpgroups (64 rows each) at d = 64; d = 128 has 2
  static constexpr Schedule schedule = Schedule::by_shape;  ///< how blocks take Q tiles
  static constexpr bool tree_reduce = true;               ///< a row's max and sum as a tree (else one long chain)
  static constexpr Lazy lazy = Lazy::at_d128;             ///< where a row's max moves lazily
  static constexpr int p_buffers_d64 = 1;                 ///< P's registers at d = 64 (2: P_{j+1} made while P_j·V_j runs)
  static constexpr int q_buffers_d64 = 2;                 ///< Q buffers at d = 64 (2: the next tile's Q copied early)
  /// O's rows at d = 128 written 16 bytes a store, after a transpose across each quad of lanes
  /// (4 bytes a store at d = 64, and where O is not 16-byte aligned)
  static constexpr bool wide_o_d128 = true;
};

// The variants LOG.md measures, each the finished kernel with one change.

/// The variant `PersistentAlways` (see its summary).
struct PersistentAlways : Tuned {
  static constexpr const char* name = "persistent_always";  ///< --variant persistent_always
  static constexpr const char* summary = "one block a multiprocessor at every length";  ///< for --help
  static constexpr Schedule schedule = Schedule::persistent;  ///< the change
};
/// The variant `OneTileABlock` (see its summary).
struct OneTileABlock : Tuned {
  static constexpr const char* name = "one_tile_a_block";  ///< --variant one_tile_a_block
  static constexpr const char* summary = "a block for each Q tile (tuning run 3's kernel)";  ///< for --help
  static constexpr Schedule schedule = Schedule::tile_per_block;  ///< the change
};
/// The variant `ThreeConsumers` (see its summary).
struct ThreeConsumers : Tuned {
  static constexpr const char* name = "three_consumers";  ///< --variant three_consumers
  static constexpr const char* summary = "d = 64: three consumer warpgroups, Br = 192";  ///< for --help
  static constexpr int consumers_d64 = 3;  ///< the change
};
/// The variant `NoOverlap` (see its summary).
struct NoOverlap : Tuned {
  static constexpr const char* name = "no_overlap";  ///< --variant no_overlap
  static constexpr const char* summary = "each product waited for at once: no softmax under P·V";  ///< for --help
  static constexpr bool overlap = false;  ///< the change (and with it the turns)
};
/// The variant `Ring2` (see its summary).
struct Ring2 : Tuned {
  static constexpr const char* name = "ring2";  ///< --variant ring2
  static constexpr const char* summary = "two K/V slots in the ring instead of three";  ///< for --help
  static constexpr int stages = 2;  ///< the change
};
/// The variant `NoPingpong` (see its summary).
struct NoPingpong : Tuned {
  static constexpr const char* name = "no_pingpong";  ///< --variant no_pingpong
  static constexpr const char* summary = "the consumers do not take turns at the tensor cores";  ///< for --help
  static constexpr bool pingpong = false;  ///< the change
};
/// The variant `SerialReduce` (see its summary).
struct SerialReduce : Tuned {
  static constexpr const char* name = "serial_reduce";  ///< --variant serial_reduce
  static constexpr const char* summary = "a row's max and sum in one chain of dependent steps each";  ///< for --help
  static constexpr bool tree_reduce = false;  ///< the change
};
/// The variant `OneQBuffer` (see its summary).
struct OneQBuffer : Tuned {
  static constexpr const char* name = "one_q_buffer";  ///< --variant one_q_buffer
  /// For --help.
  static constexpr const char* summary = "d = 64: the next tile's Q copied only after this one's last S";
  static constexpr int q_buffers_d64 = 1;  ///< the change
};
/// The variant `PDouble` (see its summary).
struct PDouble : Tuned {
  static constexpr const char* name = "p_double";  ///< --variant p_double
  static constexpr const char* summary = "d = 64: P_{j+1} made in a second buffer while P_j·V_j runs";  ///< for --help
  static constexpr int p_buffers_d64 = 2;  ///< the change
};
/// The variant `Eager` (see its summary).
struct Eager : Tuned {
  static constexpr const char* name = "eager";  ///< --variant eager
  static constexpr const char* summary = "O rescaled whenever a row's max moves, at d = 128 too";  ///< for --help
  static constexpr Lazy lazy = Lazy::never;  ///< the change
};
/// The variant `LazyAll` (see its summary).
struct LazyAll : Tuned {
  static constexpr const char* name = "lazy_all";  ///< --variant lazy_all
  static constexpr const char* summary = "lazy rescaling at d = 64 too";  ///< for --help
  static constexpr Lazy lazy = Lazy::always;  ///< the change
};
/// The variant `NarrowO` (see its summary).
struct NarrowO : Tuned {
  static constexpr const char* name = "narrow_o";  ///< --variant narrow_o
  static constexpr const char* summary = "O written 4 bytes a store at d = 128 too";  ///< for --help
  static constexpr bool wide_o_d128 = false;  ///< the change
};

/// Every variant, in LOG.md's order, the finished kernel first.
using Variants = std::tuple<Tuned, PersistentAlways, OneTileABlock, ThreeConsumers, NoOverlap, Ring2, NoPingpong,
                            SerialReduce, OneQBuffer, PDouble, Eager, LazyAll, NarrowO>;

/// The variants as the demo driver runs them (`--variant NAME`); each runs fp16 at d = 64 and 128.
std::vector<StageVariant> variants();

}  // namespace fa::hopper
