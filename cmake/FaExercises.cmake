# The exercises: a learner's copy of a stage's kernel with one marked piece taken out, or
# with a bug put in (stages/<id>/exercises/<name>.cu), graded on the CPU backend by the
# stage's exercise tests.
#
# fa_add_exercise(<id> <name> KERNEL <file.cu> TESTS <test.cpp> [DEPENDS <id>...] [SOURCES <host.cpp>...])
#   <name>          the exercise, as marked in KERNEL ("// exercise <name>: ..." to
#                   "// end exercise <name>", see tests/exercise_stub.cpp)
#   TESTS           the stage's exercise tests; the exercise runs those tagged [<name>]
#   DEPENDS         stages whose CPU libraries the kernel needs
#   SOURCES         host files of the stage the tests need besides the kernel
# makes (none built by default: the grader builds each, so that a copy that does not
# compile breaks nothing else)
#   exercise_<name>            the tests built on the learner's copy (CPU backend)
#   exercise_<name>_cuda       the same on the GPU, in a build with CUDA
#   exercises_<id>_solution    the same tests on the stage's own kernel (one per stage)
#   exercises_check            all of them, and each copy as the markers give it now
# With FA_EXERCISES_GRADE (`cmake --workflow --preset exercises`) the test grade_exercises
# (label grade) grades the copies with cmake/grade.cmake. With FA_EXERCISES_CHECK (what CI
# runs: `cmake --workflow --preset exercises-check`),
# the tests that keep the exercises honest, label "honesty": each committed copy is exactly
# what the kernel's markers give, each copy as shipped fails its tests, and the stage's own
# kernel, the solution, passes them.
# `cmake --build <dir> --target update_exercise_stubs` rewrites the committed copies from
# the kernels, for after a kernel changes.
option(FA_EXERCISES_CHECK "Build every exercise and test that its copy fails and its solution passes" OFF)
option(FA_EXERCISES_GRADE "Add the test that grades the learner's copies (label grade)" OFF)

add_executable(fa_exercise_stub ${PROJECT_SOURCE_DIR}/tests/exercise_stub.cpp)
add_custom_target(update_exercise_stubs)
add_custom_target(exercises_check)  # what the honesty tests run
set_property(GLOBAL PROPERTY FA_EXERCISE_LIST "")

function(fa_add_exercise id name)
  cmake_parse_arguments(PARSE_ARGV 2 ARG "" "KERNEL;TESTS" "DEPENDS;SOURCES")
  if(NOT FA_HAVE_CPU_BACKEND AND NOT FA_HAVE_CUDA)
    return()
  endif()
  set(kernel ${CMAKE_CURRENT_SOURCE_DIR}/${ARG_KERNEL})
  set(fresh ${CMAKE_CURRENT_BINARY_DIR}/exercises/${name}.cu)  # what the markers give now
  add_custom_command(OUTPUT ${fresh}
    COMMAND fa_exercise_stub ${kernel} ${name} ${fresh}
    DEPENDS ${kernel} fa_exercise_stub
    COMMENT "Exercise ${name}: the copy from ${ARG_KERNEL}'s markers")
  fa_exercise_targets(${id} ${name} ${fresh} TESTS ${ARG_TESTS} DEPENDS ${ARG_DEPENDS} SOURCES ${ARG_SOURCES})
endfunction()

# fa_add_bug_exercise(<id> <name> KERNEL <file.cu> RIGHT <text> WRONG <text> TESTS <test.cpp>
#                     [DEPENDS <id>...] [SOURCES <host.cpp>...])
# A find-the-bug exercise: a copy of KERNEL with the text RIGHT (which must occur exactly
# once) replaced by WRONG and without the variants, as fa_kernel_with_bug() makes it
# (cmake/FaStage.cmake), and a first line "// BUG(exercise <name>): ..." that the learner
# deletes once the bug is fixed. The failing tests are the only clue.
function(fa_add_bug_exercise id name)
  cmake_parse_arguments(PARSE_ARGV 2 ARG "" "KERNEL;RIGHT;WRONG;TESTS" "DEPENDS;SOURCES")
  if(NOT FA_HAVE_CPU_BACKEND AND NOT FA_HAVE_CUDA)
    return()
  endif()
  fa_kernel_with_bug(source KERNEL ${CMAKE_CURRENT_SOURCE_DIR}/${ARG_KERNEL} RIGHT "${ARG_RIGHT}" WRONG "${ARG_WRONG}")
  set(fresh ${CMAKE_CURRENT_BINARY_DIR}/exercises/${name}.cu)
  file(WRITE ${fresh}.tmp "// BUG(exercise ${name}): this copy of ${ARG_KERNEL} differs from a correct kernel in one \
place, and the tests of exercise ${name} fail. Find it, fix it, then delete this line.\n${source}")
  configure_file(${fresh}.tmp ${fresh} COPYONLY)  # rewritten only when it changes
  fa_exercise_targets(${id} ${name} ${fresh} TESTS ${ARG_TESTS} DEPENDS ${ARG_DEPENDS} SOURCES ${ARG_SOURCES})
endfunction()

# What every exercise has: the learner's copy stages/<id>/exercises/<name>.cu, built on its
# tests; the stage's solution; the targets that update and check the copy against `fresh`.
function(fa_exercise_targets id name fresh)
  cmake_parse_arguments(PARSE_ARGV 3 ARG "" "TESTS" "DEPENDS;SOURCES")
  set(copy ${CMAKE_CURRENT_SOURCE_DIR}/exercises/${name}.cu)  # the learner's
  add_custom_target(exercise_${name}_fresh DEPENDS ${fresh})
  add_custom_target(update_exercise_${name}
    COMMAND ${CMAKE_COMMAND} -E copy ${fresh} ${copy}
    DEPENDS ${fresh})
  add_dependencies(update_exercise_stubs update_exercise_${name})

  set(cpu "")
  if(FA_HAVE_CPU_BACKEND)
    set(cpu cpu)
    set(deps "")
    foreach(dep IN LISTS ARG_DEPENDS)
      list(APPEND deps fa_stage${dep}_cpu)
    endforeach()
    # Built as the stage's own CPU library is (stage 08's without the race detector).
    get_target_property(no_race fa_stage${id}_cpu FA_NO_RACECHECK)
    fa_cpu_kernel_library(exercise_${name}_kernel NO_RACECHECK "${no_race}" ${copy})
    target_sources(exercise_${name}_kernel PRIVATE ${ARG_SOURCES})
    target_link_libraries(exercise_${name}_kernel PUBLIC ${deps})
    add_executable(exercise_${name} ${CMAKE_CURRENT_SOURCE_DIR}/${ARG_TESTS} ${PROJECT_SOURCE_DIR}/tests/test_main.cpp)
    target_link_libraries(exercise_${name} PRIVATE exercise_${name}_kernel fa_catch_session)
    target_include_directories(exercise_${name} PRIVATE ${PROJECT_SOURCE_DIR})
    set_target_properties(exercise_${name}_kernel exercise_${name} PROPERTIES EXCLUDE_FROM_ALL TRUE)
  endif()

  # With CUDA, the same tests on the GPU too (exercise_<name>_cuda), the copy compiled as the
  # stage's own CUDA library is; the grader runs them where there is a GPU (exit 77: none).
  set(gpu "")
  if(FA_HAVE_CUDA AND TARGET fa_stage${id}_cuda)
    set(gpu cuda)
    set(cuda_deps "")
    foreach(dep IN LISTS ARG_DEPENDS)
      list(APPEND cuda_deps fa_stage${dep}_cuda)
    endforeach()
    add_library(exercise_${name}_kernel_cuda STATIC ${copy} ${ARG_SOURCES})
    target_link_libraries(exercise_${name}_kernel_cuda PUBLIC fa_runtime_cuda ${cuda_deps})
    target_include_directories(exercise_${name}_kernel_cuda PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
    get_target_property(options fa_stage${id}_cuda COMPILE_OPTIONS)
    get_target_property(archs fa_stage${id}_cuda CUDA_ARCHITECTURES)
    if(options)
      target_compile_options(exercise_${name}_kernel_cuda PRIVATE ${options})
    endif()
    set_target_properties(exercise_${name}_kernel_cuda PROPERTIES CUDA_ARCHITECTURES "${archs}")
    add_executable(exercise_${name}_cuda ${CMAKE_CURRENT_SOURCE_DIR}/${ARG_TESTS} ${PROJECT_SOURCE_DIR}/tests/test_main.cpp)
    target_link_libraries(exercise_${name}_cuda PRIVATE exercise_${name}_kernel_cuda fa_catch_session)
    target_include_directories(exercise_${name}_cuda PRIVATE ${PROJECT_SOURCE_DIR})
    target_compile_definitions(exercise_${name}_cuda PRIVATE FA_TEST_NEEDS_DEVICE=1)
    if(archs STREQUAL "OFF")  # sm_90a only: skipped, not failed, on another GPU
      target_compile_definitions(exercise_${name}_cuda PRIVATE FA_TEST_NEEDS_HOPPER=1)
    endif()
    set_target_properties(exercise_${name}_kernel_cuda exercise_${name}_cuda PROPERTIES EXCLUDE_FROM_ALL TRUE)
  endif()
  set_property(GLOBAL APPEND PROPERTY FA_EXERCISE_LIST "${id}|${name}|${copy}|${cpu}|${gpu}")
  if(NOT cpu)  # the checks below are the CPU backend's
    return()
  endif()

  # The stage's own kernel on the same tests: the solution, which must pass.
  set(solution exercises_${id}_solution)
  if(NOT TARGET ${solution})
    add_executable(${solution} ${CMAKE_CURRENT_SOURCE_DIR}/${ARG_TESTS} ${PROJECT_SOURCE_DIR}/tests/test_main.cpp)
    target_link_libraries(${solution} PRIVATE fa_stage${id}_cpu fa_catch_session)
    target_include_directories(${solution} PRIVATE ${PROJECT_SOURCE_DIR})
    set_target_properties(${solution} PROPERTIES EXCLUDE_FROM_ALL TRUE)
    add_dependencies(exercises_check ${solution})
    if(FA_EXERCISES_CHECK)
      add_test(NAME ${solution} COMMAND ${solution})
      # Without the race detector, a third of the time: the stage's own tests run this kernel
      # with it. The copies' tests below keep it, as a learner's grading does.
      set_tests_properties(${solution} PROPERTIES LABELS honesty TIMEOUT 600 ENVIRONMENT FA_CPU_RACECHECK=0)
    endif()
  endif()

  add_dependencies(exercises_check exercise_${name} exercise_${name}_fresh)
  if(FA_EXERCISES_CHECK)
    add_test(NAME exercise_${name}_copy_is_current
             COMMAND ${CMAKE_COMMAND} -E compare_files ${fresh} ${copy})
    add_test(NAME exercise_${name}_copy_fails
             COMMAND ${CMAKE_COMMAND} -DEXPECT_EXIT=nonzero "-DEXPECT_OUTPUT=test cases?:.*failed"
                     -P ${PROJECT_SOURCE_DIR}/cmake/expect.cmake -- $<TARGET_FILE:exercise_${name}> "[${name}]")
    set_tests_properties(exercise_${name}_copy_is_current exercise_${name}_copy_fails PROPERTIES
                         LABELS honesty TIMEOUT 600)
  endif()
endfunction()

# After every stage: the list the grader reads, and the grading test (label "grade").
function(fa_finish_exercises)
  get_property(list GLOBAL PROPERTY FA_EXERCISE_LIST)
  string(REPLACE ";" "\n" text "${list}")
  file(WRITE ${PROJECT_BINARY_DIR}/exercises.txt "#source ${PROJECT_SOURCE_DIR}\n${text}\n")
  if(list AND FA_EXERCISES_GRADE)
    add_test(NAME grade_exercises
             COMMAND ${CMAKE_COMMAND} -DBUILD_DIR=${PROJECT_BINARY_DIR} -P ${PROJECT_SOURCE_DIR}/cmake/grade.cmake)
    set_tests_properties(grade_exercises PROPERTIES LABELS grade TIMEOUT 3600)
  endif()
endfunction()
