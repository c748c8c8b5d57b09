# Test helpers: Catch2 2.x (Debian 12) or 3.x, one CTest entry per test binary.
find_package(Catch2 REQUIRED)
# Catch2::Catch2 is the header-only library in 2.x and the compiled one (without a
# main) in 3.x; tests/test_main.cpp provides main() for both.
set(FA_CATCH_TARGET Catch2::Catch2)
message(STATUS "Catch2 ${Catch2_VERSION} (${Catch2_DIR})")
# Catch2's implementation, compiled once for every test binary.
add_library(fa_catch_session STATIC ${PROJECT_SOURCE_DIR}/tests/catch_session.cpp)
target_link_libraries(fa_catch_session PUBLIC ${FA_CATCH_TARGET})
target_include_directories(fa_catch_session PRIVATE ${PROJECT_SOURCE_DIR})
target_compile_definitions(fa_catch_session PUBLIC FA_CATCH2_MAJOR=${Catch2_VERSION_MAJOR})
# The test runner's own code needs no optimisation: at -O0 it compiles in about half the time.
target_compile_options(fa_catch_session PRIVATE $<$<CXX_COMPILER_ID:GNU,Clang>:-O0>)

# fa_add_catch_test(<name> BACKEND none|cuda|cpu SOURCES ... LIBS ...)
# A `cuda` test binary exits with 77 when no GPU is present; CTest shows it as skipped.
function(fa_add_catch_test name)
  cmake_parse_arguments(PARSE_ARGV 1 ARG "" "BACKEND" "SOURCES;LIBS")
  add_executable(${name} ${ARG_SOURCES} ${PROJECT_SOURCE_DIR}/tests/test_main.cpp)
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} fa_catch_session)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR})
  if(NOT ARG_BACKEND STREQUAL "none")
    target_compile_definitions(${name} PRIVATE FA_TEST_NEEDS_DEVICE=1)
  endif()
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 1800
                                          LABELS "${ARG_BACKEND}")
  # The CPU backend's stage tests take tens of seconds to minutes, the rest a second or less.
  # CTest runs tests of higher COST first: a fresh build has no timings of its own, and the
  # longest tests would otherwise start last and finish alone on one core.
  if(ARG_BACKEND STREQUAL "cpu")
    set_tests_properties(${name} PROPERTIES COST 100)
  endif()
endfunction()

# fa_add_cli_test(<name> EXIT <code> OUTPUT <regex> COMMAND <exe> <args>...)
# Runs a program and requires its exit code and a match in its stdout+stderr.
# Skipped where the program reports that no GPU is available.
function(fa_add_cli_test name)
  cmake_parse_arguments(PARSE_ARGV 1 ARG "" "EXIT;OUTPUT" "COMMAND")
  add_test(NAME ${name}
           COMMAND ${CMAKE_COMMAND} -DEXPECT_EXIT=${ARG_EXIT} -DEXPECT_OUTPUT=${ARG_OUTPUT}
                   -P ${PROJECT_SOURCE_DIR}/cmake/expect.cmake -- ${ARG_COMMAND})
  set_tests_properties(${name} PROPERTIES TIMEOUT 600 LABELS cli
                       SKIP_REGULAR_EXPRESSION "no CUDA GPU is available")
endfunction()

# fa_python_with(<var> <module>): sets <var> to the first of Python3_EXECUTABLE and
# /usr/bin/python3 that imports <module> (Debian packages such as python3-torch and
# python3-selenium are for Debian's own python3, which need not be the first on PATH), or
# to Python3_EXECUTABLE when neither does (the test then reports itself skipped).
function(fa_python_with var module)
  set(found ${Python3_EXECUTABLE})
  foreach(py IN ITEMS ${Python3_EXECUTABLE} /usr/bin/python3)
    execute_process(COMMAND ${py} -c "import ${module}" RESULT_VARIABLE missing OUTPUT_QUIET ERROR_QUIET)
    if(missing EQUAL 0)
      set(found ${py})
      break()
    endif()
  endforeach()
  set(${var} ${found} PARENT_SCOPE)
endfunction()
