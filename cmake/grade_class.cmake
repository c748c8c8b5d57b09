# cmake -DLEARNERS=<folder> -P grade_class.cmake
# Grades a class: every subfolder of <folder> is one learner's clone of the project. For each,
# configures the exercises preset in <learner>/build-exercises (the CPU backend; no GPU
# needed), grades every exercise with cmake/grade.cmake, and gathers the results in
# <folder>/grades.csv: learner, exercise, stage, status, detail. A learner whose clone does
# not configure gets one line saying so. Exits 0: a grade is a report.
if(NOT LEARNERS OR NOT IS_DIRECTORY "${LEARNERS}")
  message(FATAL_ERROR "grade_class.cmake: -DLEARNERS=<a folder with one clone per learner> is required")
endif()
get_filename_component(LEARNERS "${LEARNERS}" ABSOLUTE)
file(GLOB learners LIST_DIRECTORIES true RELATIVE "${LEARNERS}" "${LEARNERS}/*")
list(SORT learners)
set(csv "learner,exercise,stage,status,detail\n")
foreach(learner IN LISTS learners)
  set(dir "${LEARNERS}/${learner}")
  if(NOT IS_DIRECTORY "${dir}" OR NOT EXISTS "${dir}/CMakePresets.json")
    continue()
  endif()
  message("== ${learner}")
  execute_process(COMMAND ${CMAKE_COMMAND} --preset exercises WORKING_DIRECTORY "${dir}"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    string(REGEX MATCH "CMake Error[^\n]*\n[^\n]*" first "${out}")
    string(REGEX REPLACE "[\n\"]+" " " first "${first}")
    string(APPEND csv "${learner},,,fails,\"does not configure: ${first}\"\n")
    message("  does not configure: ${first}")
    continue()
  endif()
  execute_process(COMMAND ${CMAKE_COMMAND} -DBUILD_DIR=${dir}/build-exercises
                          -P ${CMAKE_CURRENT_LIST_DIR}/grade.cmake)
  file(STRINGS "${dir}/build-exercises/grades.csv" rows)
  list(REMOVE_AT rows 0)  # the header
  foreach(row IN LISTS rows)
    string(APPEND csv "${learner},${row}\n")
  endforeach()
endforeach()
file(WRITE "${LEARNERS}/grades.csv" "${csv}")
message("the class's grades: ${LEARNERS}/grades.csv")
