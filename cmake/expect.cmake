# cmake -DEXPECT_EXIT=<code> -DEXPECT_OUTPUT=<regex> -P expect.cmake -- <program> <args>...
# Runs the program and fails unless it exits with EXPECT_EXIT and its output matches.
include(${CMAKE_CURRENT_LIST_DIR}/command_after_dashes.cmake)
execute_process(COMMAND ${cmd} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT rc STREQUAL "${EXPECT_EXIT}")
  message(FATAL_ERROR "expected exit code ${EXPECT_EXIT}, got ${rc}")
endif()
if(NOT "${out}${err}" MATCHES "${EXPECT_OUTPUT}")
  message(FATAL_ERROR "output does not match: ${EXPECT_OUTPUT}")
endif()
