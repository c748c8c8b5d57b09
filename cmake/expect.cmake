# cmake -DEXPECT_EXIT=<code> -DEXPECT_OUTPUT=<regex> -P expect.cmake -- <program> <args>...
# Runs the program and fails unless it exits with EXPECT_EXIT (a number, or "nonzero": any
# exit code but 0, from a program that ran) and its output matches.
include(${CMAKE_CURRENT_LIST_DIR}/command_after_dashes.cmake)
execute_process(COMMAND ${cmd} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(EXPECT_EXIT STREQUAL "nonzero")
  if(NOT rc MATCHES "^[1-9][0-9]*$")
    message(FATAL_ERROR "expected a nonzero exit code, got ${rc}")
  endif()
elseif(NOT rc STREQUAL "${EXPECT_EXIT}")
  message(FATAL_ERROR "expected exit code ${EXPECT_EXIT}, got ${rc}")
endif()
if(NOT "${out}${err}" MATCHES "${EXPECT_OUTPUT}")
  message(FATAL_ERROR "output does not match: ${EXPECT_OUTPUT}")
endif()
