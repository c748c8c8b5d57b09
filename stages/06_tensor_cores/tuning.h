/**
 * \file tuning.h
 * \brief Stage 06's typed configuration: the tile sizes and launch bound the finished kernel
 *        uses, and the variants its tuning runs measured beside them.
 *
 * The kernel (tensor_core_attention.cu) is a template on one of these structs. The public
 * header knows only the finished kernel; this file is for the kernel file, the tests (which
 * run every variant on the CPU backend) and `--variant`, with which the demo runs any
 * variant and benchmarks/tune_stage06.sh times them all from one build:
 *
 *     stage06_tensor_cores --variant br128       # 128 query rows a block
 */
#pragma once

#include <tuple>
#include <vector>

#include "common/demo.h"
#include "stages/06_tensor_cores/tensor_core_attention.h"

namespace fa::tensor_core {

/// The finished kernel's tiles; a variant derives from this struct and changes a member.
struct Tuned {
  static constexpr const char* name = "tuned";  ///< what --variant takes
  /// How the variant differs from the finished kernel, for --help.
  static constexpr const char* summary = "the finished kernel, as the demo runs it without --variant";
  static constexpr int br = Br;          ///< query rows per tile: one warp per 16
  static constexpr int bc = Bc;          ///< key/value rows per tile
  static constexpr int min_blocks = 4;   ///< blocks per multiprocessor __launch_bounds__ leaves registers for
};

// The variants the tuning runs measured (the lesson's table).

/// The variant `Min2` (see its summary).
struct Min2 : Tuned {
  static constexpr const char* name = "min2";  ///< --variant min2
  static constexpr const char* summary = "__launch_bounds__ for 2 blocks a multiprocessor";  ///< for --help
  static constexpr int min_blocks = 2;  ///< the change
};
/// The variant `Min3` (see its summary).
struct Min3 : Tuned {
  static constexpr const char* name = "min3";  ///< --variant min3
  static constexpr const char* summary = "__launch_bounds__ for 3 blocks a multiprocessor";  ///< for --help
  static constexpr int min_blocks = 3;  ///< the change
};
/// The variant `Bc32` (see its summary).
struct Bc32 : Tuned {
  static constexpr const char* name = "bc32";  ///< --variant bc32
  static constexpr const char* summary = "Bc = 32";  ///< for --help
  static constexpr int bc = 32;  ///< the change
};
/// The variant `Bc128` (see its summary).
struct Bc128 : Tuned {
  static constexpr const char* name = "bc128";  ///< --variant bc128
  static constexpr const char* summary = "Bc = 128";  ///< for --help
  static constexpr int bc = 128;  ///< the change
};
/// The variant `Br128` (see its summary).
struct Br128 : Tuned {
  static constexpr const char* name = "br128";  ///< --variant br128
  static constexpr const char* summary = "Br = 128: 8 warps a block";  ///< for --help
  static constexpr int br = 128;  ///< the change
};
/// The variant `Br128Min2` (see its summary).
struct Br128Min2 : Br128 {
  static constexpr const char* name = "br128_min2";  ///< --variant br128_min2
  /// For --help.
  static constexpr const char* summary = "Br = 128 and __launch_bounds__ for 2 blocks a multiprocessor";
  static constexpr int min_blocks = 2;  ///< the change
};

/// Every variant, the finished kernel first.
using Variants = std::tuple<Tuned, Min2, Min3, Bc32, Bc128, Br128, Br128Min2>;

/// The variants as the demo driver runs them (`--variant NAME`); each runs fp16 at d = 64 and 128.
std::vector<StageVariant> variants();

}  // namespace fa::tensor_core
