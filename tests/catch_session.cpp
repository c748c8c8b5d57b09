// Catch2's own implementation and its session, compiled once and linked into every test
// binary (tests/test_main.cpp calls run_catch): in Catch2 2.x the implementation lives in
// the single header, and compiling it is most of a test binary's build time.
#define FA_CATCH_MAIN
#include "tests/catch.h"

namespace fa::test {

/// Runs the binary's test cases with Catch2's command line. \returns Catch2's exit code.
int run_catch(int argc, char** argv) { return Catch::Session().run(argc, argv); }

}  // namespace fa::test
