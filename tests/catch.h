// Catch2 2.x (one header) or 3.x (split headers): FA_CATCH2_MAJOR comes from the
// Catch2 package that CMake found, so the headers always match the library linked.
#pragma once
#include <string>

#if FA_CATCH2_MAJOR >= 3
#include <catch2/catch_all.hpp>
using Catch::Approx;  // unqualified, as Catch2 2.x has it
namespace fa::test {
/// Matches strings containing `s` (Catch2 3.x name).
inline Catch::Matchers::StringContainsMatcher HasSubstring(const std::string& s) {
  return Catch::Matchers::ContainsSubstring(s);
}
}  // namespace fa::test
#else
#ifdef FA_CATCH_MAIN
#define CATCH_CONFIG_RUNNER
#endif
#include <catch2/catch.hpp>
namespace fa::test {
/// Matches strings containing `s` (Catch2 2.x name).
inline Catch::Matchers::StdString::ContainsMatcher HasSubstring(const std::string& s) {
  return Catch::Matchers::Contains(s);
}
}  // namespace fa::test
#endif
