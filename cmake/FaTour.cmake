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
add_custom_target(tour
  COMMAND ${CMAKE_COMMAND} -DBIN_DIR=${CMAKE_RUNTIME_OUTPUT_DIRECTORY} -DSTAGES=${_stage_list}
          -P ${PROJECT_SOURCE_DIR}/cmake/tour.cmake
  DEPENDS ${_demos}
  USES_TERMINAL
  COMMENT "Tour of the stages")
