# fa_add_stage(<id> KERNELS <file.cu>... [SOURCES <host.cpp>...] DEMO <demo.cpp>
#              [DEPENDS <id>...] [TESTS <test.cpp>...] [HOPPER_ONLY])
#
# Adds one stage, e.g. fa_add_stage(01_naive KERNELS naive_attention.cu DEMO demo.cpp
# TESTS ${PROJECT_SOURCE_DIR}/tests/test_stage01_naive.cpp), which makes
#   fa_stage01_naive_cuda   library: the stage's kernels and host launchers
#   stage01_naive           the demo executable
#   test_stage01_naive_cuda the stage's Catch2 tests, registered with CTest
#                           (skipped, not passed, when no GPU is present)
# HOPPER_ONLY: the kernels use sm_90a instructions (wgmma, setmaxnreg): the GPU build is
# for sm_90a alone, with nvcc 12 or newer, and its tests skip on other GPUs. The CPU twin
# runs them through the backend's Hopper emulation (fa_cpu/hopper.h), without the race
# detector's shared-memory rules, which do not model mbarriers and named barriers (races
# between blocks in global memory are checked).
define_property(GLOBAL PROPERTY FA_STAGES BRIEF_DOCS "stage ids in order" FULL_DOCS "for the tour")

# fa_cpu_kernel_library(<target> [NO_RACECHECK <bool>] <file.cu>...): a library of kernel
# files built for the CPU backend. Each .cu is rewritten by fa_cu2cpp into a .cpp that keeps
# its line numbers. NO_RACECHECK true: without the race detector's shared-memory rules,
# which do not model mbarriers; its launches are still checked for races between blocks in
# global memory (kept as the target's property FA_NO_RACECHECK, so that a planted copy is
# built the same way).
function(fa_cpu_kernel_library target)
  cmake_parse_arguments(PARSE_ARGV 1 ARG "" "NO_RACECHECK" "")
  set(generated "")
  foreach(cu IN LISTS ARG_UNPARSED_ARGUMENTS)
    get_filename_component(abs ${cu} ABSOLUTE)
    get_filename_component(name ${cu} NAME)
    set(out ${CMAKE_CURRENT_BINARY_DIR}/cpu/${name}.cpp)
    add_custom_command(OUTPUT ${out}
      COMMAND fa_cu2cpp ${abs} ${out}
      DEPENDS ${abs} fa_cu2cpp
      COMMENT "CPU backend: ${name}")
    list(APPEND generated ${out})
  endforeach()
  add_library(${target} STATIC ${generated})
  set_target_properties(${target} PROPERTIES FA_NO_RACECHECK "${ARG_NO_RACECHECK}")
  target_link_libraries(${target} PUBLIC fa_runtime_cpu)
  target_include_directories(${target} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
  # Only the rewritten kernel files see the CUDA keywords of kernel.h. With the race
  # detector, the compiler reports their loads and stores to it (-fsanitize=thread at
  # compile time only: the backend answers the calls, ThreadSanitizer is not linked), and
  # a line table (-g1) lets its reports name source lines. DWARF 4, because Debian 12's
  # addr2line names the generated .cpp instead of the #line file with DWARF 5. -O2 in a
  # Release build: measured on the CI's kind of machine, the release build's 39 kernel files
  # took 453 s of CPU time to compile against 684 s at -O3, and the tests summed to 518 s
  # against 514 s.
  set(options "-include;fa_cpu/kernel.h;$<$<CONFIG:Release>:-O2>")
  if(FA_CPU_RACECHECK)
    list(APPEND options "-fsanitize=thread;-g1;-gdwarf-4")
    if(ARG_NO_RACECHECK)  # global memory is checked all the same (racecheck.h)
      list(APPEND options "-DFA_CPU_NO_SHARED_RACECHECK=1")
    endif()
  endif()
  set_source_files_properties(${generated} PROPERTIES COMPILE_OPTIONS "${options}")
  # #pragma unroll is nvcc's (the CPU compiler unrolls by its own judgement).
  target_compile_options(${target} PRIVATE
    $<$<CXX_COMPILER_ID:GNU,Clang>:-Wall -Wno-unused-function -Wno-unknown-pragmas>)
endfunction()

function(fa_add_stage id)
  cmake_parse_arguments(PARSE_ARGV 1 ARG "HOPPER_ONLY" "DEMO" "KERNELS;SOURCES;TESTS;DEPENDS")
  set_property(GLOBAL APPEND PROPERTY FA_STAGES ${id})
  if(ARG_HOPPER_ONLY AND FA_HAVE_CUDA AND CMAKE_CUDA_COMPILER_VERSION VERSION_LESS 12.0)
    message(STATUS "Stage ${id} needs nvcc 12 or newer (sm_90a): not built")
    return()
  endif()
  if(FA_HAVE_CPU_BACKEND)
    fa_cpu_kernel_library(fa_stage${id}_cpu NO_RACECHECK ${ARG_HOPPER_ONLY} ${ARG_KERNELS})
    target_sources(fa_stage${id}_cpu PRIVATE ${ARG_SOURCES})
    # Coverage: the stage's own kernel files only (not the planted and exercise copies), at
    # -O0 so that every line's count is its own (optimised, a line's code can be counted on
    # its neighbour's). Stage 07's tests under ASan took 88 s with them at -O0 or -O1: the time
    # is in the backend and the reference.
    if(FA_COVERAGE)
      target_compile_options(fa_stage${id}_cpu PRIVATE --coverage -O0)
    endif()
    foreach(dep IN LISTS ARG_DEPENDS)
      target_link_libraries(fa_stage${id}_cpu PUBLIC fa_stage${dep}_cpu)
    endforeach()
    add_executable(stage${id}_cpu ${ARG_DEMO})
    target_link_libraries(stage${id}_cpu PRIVATE fa_stage${id}_cpu)
    if(FA_BUILD_TESTS AND ARG_TESTS)
      fa_add_catch_test(test_stage${id}_cpu BACKEND cpu SOURCES ${ARG_TESTS} LIBS fa_stage${id}_cpu)
    endif()
  endif()
  if(NOT FA_HAVE_CUDA)
    return()
  endif()
  set(lib fa_stage${id}_cuda)
  add_library(${lib} STATIC ${ARG_KERNELS} ${ARG_SOURCES})
  target_link_libraries(${lib} PUBLIC fa_runtime_cuda)
  foreach(dep IN LISTS ARG_DEPENDS)
    target_link_libraries(${lib} PUBLIC fa_stage${dep}_cuda)
  endforeach()
  target_compile_options(${lib} PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -lineinfo -Xcompiler=-Wall>)
  if(ARG_HOPPER_ONLY)
    set_target_properties(${lib} PROPERTIES CUDA_ARCHITECTURES OFF)
    target_compile_options(${lib} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-gencode=arch=compute_90a,code=sm_90a>)
  endif()

  add_executable(stage${id} ${ARG_DEMO})
  target_link_libraries(stage${id} PRIVATE ${lib})

  if(FA_BUILD_TESTS AND ARG_TESTS)
    fa_add_catch_test(test_stage${id}_cuda BACKEND cuda SOURCES ${ARG_TESTS} LIBS ${lib})
    if(ARG_HOPPER_ONLY)  # skipped, not passed, on another GPU
      target_compile_definitions(test_stage${id}_cuda PRIVATE FA_TEST_NEEDS_HOPPER=1)
    endif()
  endif()
endfunction()

# fa_kernel_with_bug(<out-var> KERNEL <path> RIGHT <text> WRONG <text>)
# <out-var> gets the text of KERNEL (also a dependency of the configure step) with RIGHT,
# which must occur in it exactly once, replaced by WRONG, and without the kernel's variants
# (the function after the comment "// The variants of tuning.h", to the first line that is a
# lone "}"): those are the real kernel's, and a copy builds only what its tests call.
# Configuring fails if RIGHT is not there once, so a bug cannot silently stop being planted.
# Serves the planted copies here and the find-the-bug exercises (cmake/FaExercises.cmake).
function(fa_kernel_with_bug out)
  cmake_parse_arguments(PARSE_ARGV 1 ARG "" "KERNEL;RIGHT;WRONG" "")
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${ARG_KERNEL})
  file(READ ${ARG_KERNEL} source)
  string(REPLACE "${ARG_RIGHT}" "" without "${source}")
  string(LENGTH "${source}" n_source)
  string(LENGTH "${without}" n_without)
  string(LENGTH "${ARG_RIGHT}" n_right)
  math(EXPR times "(${n_source} - ${n_without}) / ${n_right}")
  if(NOT times EQUAL 1)
    message(FATAL_ERROR "${ARG_KERNEL} contains '${ARG_RIGHT}' ${times} times, not once: update the planted bug")
  endif()
  string(REPLACE "${ARG_RIGHT}" "${ARG_WRONG}" source "${source}")
  string(FIND "${source}" "\n// The variants of tuning.h" at)
  if(NOT at EQUAL -1)
    string(SUBSTRING "${source}" 0 ${at} head)
    string(SUBSTRING "${source}" ${at} -1 tail)
    string(FIND "${tail}" "\n}\n" end)
    math(EXPR end "${end} + 2")
    string(SUBSTRING "${tail}" ${end} -1 tail)
    set(source "${head}${tail}")
  endif()
  set(${out} "${source}" PARENT_SCOPE)
endfunction()

# fa_add_planted_copy(<id> KERNEL <file.cu> NAMESPACE <ns> RIGHT <text> WRONG <text> [CPU_ONLY]
#                     [AS <name>])
#
# A planted bug for stage <id>'s tests: a copy of KERNEL with the text RIGHT replaced by
# WRONG and namespace <ns> renamed <ns>::<name> (default: planted), built for each backend
# (CPU_ONLY: for the CPU backend alone, where the bug shows on every run) as the stage's
# kernels are, and linked into the stage's test binaries, which must see its checks fail.
# A stage may have several, each with its own AS name. The copy is made by
# fa_kernel_with_bug() above.
function(fa_add_planted_copy id)
  cmake_parse_arguments(PARSE_ARGV 1 ARG "CPU_ONLY" "KERNEL;NAMESPACE;RIGHT;WRONG;AS" "")
  if(NOT FA_BUILD_TESTS)
    return()
  endif()
  if(NOT ARG_AS)
    set(ARG_AS planted)
  endif()
  set(kernel ${CMAKE_CURRENT_SOURCE_DIR}/${ARG_KERNEL})
  fa_kernel_with_bug(source KERNEL ${kernel} RIGHT "${ARG_RIGHT}" WRONG "${ARG_WRONG}")
  string(REPLACE "namespace ${ARG_NAMESPACE} {" "namespace ${ARG_NAMESPACE}::${ARG_AS} {" source "${source}")
  string(REPLACE "}  // namespace ${ARG_NAMESPACE}" "}  // namespace ${ARG_NAMESPACE}::${ARG_AS}" source "${source}")
  get_filename_component(name ${ARG_KERNEL} NAME_WE)
  set(planted ${CMAKE_CURRENT_BINARY_DIR}/planted/${name}_${ARG_AS}.cu)
  file(WRITE ${planted}.tmp "${source}")
  configure_file(${planted}.tmp ${planted} COPYONLY)  # rewritten only when it changes
  if(FA_HAVE_CPU_BACKEND)
    get_target_property(no_race fa_stage${id}_cpu FA_NO_RACECHECK)
    fa_cpu_kernel_library(fa_stage${id}_${ARG_AS}_cpu NO_RACECHECK "${no_race}" ${planted})
    target_link_libraries(test_stage${id}_cpu PRIVATE fa_stage${id}_${ARG_AS}_cpu)
  endif()
  if(FA_HAVE_CUDA AND NOT ARG_CPU_ONLY)
    add_library(fa_stage${id}_${ARG_AS}_cuda STATIC ${planted})
    target_link_libraries(fa_stage${id}_${ARG_AS}_cuda PUBLIC fa_runtime_cuda)
    target_compile_options(fa_stage${id}_${ARG_AS}_cuda PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr>)
    get_target_property(archs fa_stage${id}_cuda CUDA_ARCHITECTURES)
    if(archs STREQUAL "OFF")  # a HOPPER_ONLY stage: built for sm_90a as the stage is
      set_target_properties(fa_stage${id}_${ARG_AS}_cuda PROPERTIES CUDA_ARCHITECTURES OFF)
      target_compile_options(fa_stage${id}_${ARG_AS}_cuda PRIVATE
        $<$<COMPILE_LANGUAGE:CUDA>:-gencode=arch=compute_90a,code=sm_90a>)
    endif()
    target_link_libraries(test_stage${id}_cuda PRIVATE fa_stage${id}_${ARG_AS}_cuda)
  endif()
endfunction()
