# The 'tour' target: every stage's demo at its default size, in order, one line each.
get_property(_stages GLOBAL PROPERTY FA_STAGES)
string(JOIN "," _stage_list ${_stages})
set(_demos "")
foreach(_id IN LISTS _stages)
  if(TARGET stage${_id})
    list(APPEND _demos stage${_id})
  endif()
  if(TARGET stage${_id}_cpu)
    list(APPEND _demos stage${_id}_cpu)
  endif()
endforeach()
if(NOT _demos)
  message(STATUS "No stage demos in this build (no nvcc and no CPU backend): no 'tour' target")
  return()
endif()
list(GET _demos 0 _first_demo)
# The demos' folder as the build lays it out (bin/, or bin/<config>/ with a multi-config generator).
add_custom_target(tour
  COMMAND ${CMAKE_COMMAND} -DBIN_DIR=$<TARGET_FILE_DIR:${_first_demo}> -DSTAGES=${_stage_list}
          -P ${PROJECT_SOURCE_DIR}/cmake/tour.cmake
  DEPENDS ${_demos}
  USES_TERMINAL
  COMMENT "Tour of the stages")
