/**
 * \file tuning.h
 * \brief Stage 09's typed configuration: the choices the finished kernels and plan make,
 *        one per step of the stage's LOG.md, and the variants that each change one.
 *
 * The kernels and make_plan (split_kv_decoding.cu) are templates on one of these structs.
 * The public header knows only the finished choices; this file is for the kernel file, the
 * tests (which run every variant on the CPU backend) and `--variant`, with which the demo
 * runs any variant and benchmarks/tune_stage09.sh times them all from one build:
 *
 *     stage09_split_kv_decoding --variant cuda_cores --batch 16 --kv-heads 8
 */
#pragma once

#include <cstdint>
#include <tuple>
#include <vector>

#include "common/demo.h"
#include "stages/09_split_kv_decoding/split_kv_decoding.h"

namespace fa::decode {

/// The finished kernels and plan. Each member is a step of LOG.md; a variant derives from
/// this struct and changes one member.
struct Tuned {
  static constexpr const char* name = "tuned";  ///< what --variant takes
  /// How the variant differs from the finished kernels, for --help.
  static constexpr const char* summary = "the finished kernels and plan, as the demo runs them without --variant";
  static constexpr int unroll = 4;          ///< 16-byte loads of K (and as many of V) each lane keeps in flight
  static constexpr int blocks_per_sm = 4;   ///< most blocks a multiprocessor the automatic split count aims for
  static constexpr int min_blocks = 1;      ///< __launch_bounds__' blocks per SM of the CUDA-core kernel
  /// The same for the tensor-core kernel: 3 keeps d = 128 at three blocks a multiprocessor
  /// (160 registers; left to itself the compiler takes 173, which allows two).
  static constexpr int mma_min_blocks = 3;
  static constexpr bool pdl = true;         ///< the merge kernel launched early (programmatic dependent launch)
  /// Fewest query rows per KV head (G·Nq) that go to the tensor cores in fp16 and bf16.
  static constexpr int64_t mma_min_rows = 2;
};

// The variants LOG.md measures, each the finished kernels or plan with one change.

/// The variant `CudaCores` (see its summary).
struct CudaCores : Tuned {
  static constexpr const char* name = "cuda_cores";  ///< --variant cuda_cores
  /// For --help.
  static constexpr const char* summary = "grouped queries on CUDA cores, 4 rows a block, never the tensor cores";
  static constexpr int64_t mma_min_rows = 1000;  ///< the change
};
/// The variant `MmaAll` (see its summary).
struct MmaAll : Tuned {
  static constexpr const char* name = "mma_all";  ///< --variant mma_all
  /// For --help.
  static constexpr const char* summary = "one row on the tensor cores too (15 of 16 rows padding)";
  static constexpr int64_t mma_min_rows = 1;  ///< the change
};
/// The variant `NoPdl` (see its summary).
struct NoPdl : Tuned {
  static constexpr const char* name = "no_pdl";  ///< --variant no_pdl
  /// For --help.
  static constexpr const char* summary = "the merge kernel launched after the split kernel ends";
  static constexpr bool pdl = false;  ///< the change
};
/// The variant `Unroll2` (see its summary).
struct Unroll2 : Tuned {
  static constexpr const char* name = "unroll2";  ///< --variant unroll2
  static constexpr const char* summary = "2 loads of K and of V in flight per lane";  ///< for --help
  static constexpr int unroll = 2;  ///< the change
};
/// The variant `Unroll8` (see its summary).
struct Unroll8 : Tuned {
  static constexpr const char* name = "unroll8";  ///< --variant unroll8
  static constexpr const char* summary = "8 loads of K and of V in flight per lane";  ///< for --help
  static constexpr int unroll = 8;  ///< the change
};
/// The variant `Blocks2` (see its summary).
struct Blocks2 : Tuned {
  static constexpr const char* name = "blocks2";  ///< --variant blocks2
  static constexpr const char* summary = "the automatic plan aims for 2 blocks a multiprocessor";  ///< for --help
  static constexpr int blocks_per_sm = 2;  ///< the change
};
/// The variant `Blocks8` (see its summary).
struct Blocks8 : Tuned {
  static constexpr const char* name = "blocks8";  ///< --variant blocks8
  static constexpr const char* summary = "the automatic plan aims for 8 blocks a multiprocessor";  ///< for --help
  static constexpr int blocks_per_sm = 8;  ///< the change
};

/// The variant `MinBlocks3` (see its summary).
struct MinBlocks3 : Tuned {
  static constexpr const char* name = "min3";  ///< --variant min3
  /// For --help.
  static constexpr const char* summary = "the CUDA-core kernel's registers capped for 3 blocks a multiprocessor";
  static constexpr int min_blocks = 3;  ///< the change
};

/// Every variant, in LOG.md's order, the finished one first.
using Variants = std::tuple<Tuned, CudaCores, MmaAll, NoPdl, Unroll2, Unroll8, Blocks2, Blocks8, MinBlocks3>;

/// A variant's plan and kernels, as make_plan and attention are the finished ones'.
struct Decoder {
  Plan (*make_plan)(const DecodeProblem&, int sm_count, int64_t splits);  ///< as fa::decode::make_plan
  /// As fa::decode::attention.
  void (*attention)(const DecodeProblem&, const Plan&, const void* Q, const void* K, const void* V,
                    const int* kv_lens, void* O, float* lse, void* workspace);
};

/// The variants as the demo runs them (`--variant NAME`); each runs fp16 at d = 64 and 128.
std::vector<Variant<Decoder>> variants();

}  // namespace fa::decode
