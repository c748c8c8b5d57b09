# cmake -DSANITIZER=<compute-sanitizer> -DTOOL=<memcheck|racecheck|synccheck|initcheck>
#       -DEXPECT=<clean|hazards> -P sanitize.cmake -- <program> <args>...
#
# Runs a GPU program under compute-sanitizer. EXPECT=clean passes only if the tool ran
# and reported nothing (its summary says 0 errors, or 0 hazards for racecheck, warnings
# included) and the program succeeded; EXPECT=hazards passes only if racecheck reported
# at least one hazard (the planted race). Prints "SKIPPED:" (CTest's skip pattern) when
# there is no compute-sanitizer or no GPU, so that such runs are never counted as passed.
include(${CMAKE_CURRENT_LIST_DIR}/command_after_dashes.cmake)

if(NOT SANITIZER OR NOT EXISTS "${SANITIZER}")
  message("SKIPPED: compute-sanitizer was not found when the build was configured")
  return()
endif()

set(tool_options "")
if(TOOL STREQUAL "racecheck")
  # Every hazard, one report each, warnings included (only "info", such as two threads
  # writing the same value, is left out).
  set(tool_options --racecheck-report hazard)
endif()
execute_process(COMMAND "${SANITIZER}" --tool ${TOOL} ${tool_options} --error-exitcode 86 ${cmd}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
set(text "${out}${err}")
message("${text}")
if(text MATCHES "no CUDA GPU is available")
  message("SKIPPED: no CUDA GPU")
  return()
endif()
if(text MATCHES "needs a Hopper GPU")
  message("SKIPPED: not a Hopper GPU")
  return()
endif()

string(REGEX MATCHALL "[A-Z]+ SUMMARY: [^\n]*" summaries "${text}")
if(NOT summaries)
  message(FATAL_ERROR "compute-sanitizer printed no summary (exit code ${rc}): the tool did not run")
endif()
set(found OFF)
foreach(line IN LISTS summaries)
  if(line MATCHES "SUMMARY: [1-9]" OR line MATCHES "[(, ][1-9][0-9]* (error|warning)")
    set(found ON)
  endif()
endforeach()

if(EXPECT STREQUAL "hazards")
  if(NOT found OR NOT text MATCHES "RACECHECK SUMMARY")
    message(FATAL_ERROR "racecheck reported no hazard for a kernel with a planted race")
  endif()
  message("racecheck found the planted race: ${summaries}")
else()
  if(found)
    message(FATAL_ERROR "${TOOL} reported problems: ${summaries}")
  endif()
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "the program failed under ${TOOL} (exit code ${rc})")
  endif()
  message("${TOOL}: clean")
endif()
