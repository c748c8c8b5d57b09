/**
 * \file npy.h
 * \brief Reading and writing tensors as NumPy `.npy` files (format version 1.0), so a
 *        learner can check a stage against NumPy or PyTorch.
 *
 * Only what the project needs: little-endian float32 ('<f4') and float16 ('<f2'), C
 * order. Anything else is rejected with a message that names the file and the problem.
 * NumPy has no bfloat16, so bf16 tensors are written as float32 ('<f4'): every bf16
 * value is exactly a float32 value, so nothing is lost, and
 * `torch.from_numpy(np.load(f)).bfloat16()` gives back the very same bf16 tensor.
 */
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/dtype.h"

namespace fa {

/// A loaded array: its shape and its values in C order.
struct NpyArray {
  std::vector<int64_t> shape;  ///< dimensions, outermost first
  std::vector<float> data;     ///< product(shape) values (float16 files are widened, exactly)
  DType stored = DType::F32;   ///< how the file stored them: F32 ('<f4') or F16 ('<f2')
};

/// Reads a '<f4' or '<f2', C-order .npy file. \throws InputError when the file is missing or malformed.
NpyArray load_npy(const std::string& path);

/**
 * Writes `data` (product(shape) floats) as a .npy file of type `as`: '<f2' for F16 (each
 * value rounded to fp16), '<f4' for F32 and for BF16 (see above). \throws InputError on
 * I/O failure.
 */
void save_npy(const std::string& path, const std::vector<int64_t>& shape, const float* data,
              DType as = DType::F32);

}  // namespace fa
