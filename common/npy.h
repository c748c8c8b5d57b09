/**
 * \file npy.h
 * \brief Reading and writing fp32 tensors as NumPy `.npy` files (format version 1.0),
 *        so a learner can check a stage against NumPy or PyTorch.
 *
 * Only what the project needs: little-endian float32 ('<f4'), C order. Anything else
 * is rejected with a message that names the file and the problem.
 */
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fa {

/// A loaded array: its shape and its values in C order.
struct NpyArray {
  std::vector<int64_t> shape;  ///< dimensions, outermost first
  std::vector<float> data;     ///< product(shape) values
};

/// Reads a '<f4', C-order .npy file. \throws InputError when the file is missing or malformed.
NpyArray load_npy(const std::string& path);

/// Writes `data` (product(shape) floats) as a '<f4' .npy file. \throws InputError on I/O failure.
void save_npy(const std::string& path, const std::vector<int64_t>& shape, const float* data);

}  // namespace fa
