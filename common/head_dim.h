/**
 * \file head_dim.h
 * \brief From the run-time head dimension to the compile-time one kernels are built for.
 */
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

#include "common/errors.h"

namespace fa {

/**
 * Calls `f(std::integral_constant<int, D>{})` for the supported head dimension D equal
 * to `d` (16, 32, 64 or 128, as in supported_head_dims()), so that a stage instantiates
 * its kernel template once per head dimension:
 * \code
 * with_head_dim(p.dim, [&](auto D) { launch<decltype(D)::value>(p, ...); });
 * \endcode
 * \throws InputError for any other d.
 */
template <typename F>
decltype(auto) with_head_dim(int64_t d, F&& f) {
  switch (d) {
    case 16: return f(std::integral_constant<int, 16>{});
    case 32: return f(std::integral_constant<int, 32>{});
    case 64: return f(std::integral_constant<int, 64>{});
    case 128: return f(std::integral_constant<int, 128>{});
  }
  throw InputError("head dim " + std::to_string(d) + " is not supported (supported: 16, 32, 64, 128)");
}

}  // namespace fa
