# Included by the cmake -P scripts run as `cmake ... -P script.cmake -- <program> <args>...`:
# sets `cmd` to the list after the "--".
set(cmd "")
set(after_dashes OFF)
math(EXPR last "${CMAKE_ARGC} - 1")
foreach(i RANGE 0 ${last})
  if(after_dashes)
    list(APPEND cmd "${CMAKE_ARGV${i}}")
  elseif(CMAKE_ARGV${i} STREQUAL "--")
    set(after_dashes ON)
  endif()
endforeach()
