# cmake -DBIN_DIR=<dir> -DSTAGES=01_naive,02_... -P tour.cmake
# Runs each stage's demo in order and prints its one-line summary. Uses the GPU when
# there is one, otherwise the CPU backend twins (stageNN_*_cpu) at their smaller size; a
# stage the GPU cannot run (stage 08 on a GPU that is not a Hopper) falls back to its twin.
string(REPLACE "," ";" STAGES "${STAGES}")
list(GET STAGES 0 first)

set(backend "")
if(EXISTS "${BIN_DIR}/stage${first}")
  # A real probe: the smallest problem. Exit 77 means no GPU.
  execute_process(COMMAND "${BIN_DIR}/stage${first}" --batch 1 --heads 1 --seq-q 1 --seq-kv 1
                          --dim 16 --repeats 1 --warmup 0 --brief
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 77)
    set(backend gpu)
  endif()
endif()
if(NOT backend AND EXISTS "${BIN_DIR}/stage${first}_cpu")
  set(backend cpu)
endif()

if(backend STREQUAL "gpu")
  message("Tour on the GPU. Each stage runs at its default size, checked against a float64 CPU reference.\n")
  set(suffix "")
elseif(backend STREQUAL "cpu")
  message("No CUDA GPU found: the tour runs the CPU backend at a small size.\n"
          "CPU-backend timings show the kernels work; they are not GPU performance.\n")
  set(suffix "_cpu")
else()
  message(FATAL_ERROR "No CUDA GPU found, and the CPU backend was not built.")
endif()

set(failed "")
foreach(id IN LISTS STAGES)
  set(exe "${BIN_DIR}/stage${id}${suffix}")
  if(NOT EXISTS "${exe}")
    if(EXISTS "${BIN_DIR}/stage${id}")
      message("stage ${id}: GPU only, no CPU twin (its README says why)")
    else()
      message("stage ${id}: not built")
    endif()
    continue()
  endif()
  execute_process(COMMAND "${exe}" --brief RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(STRIP "${out}${err}" text)
  message("${text}")
  if(rc EQUAL 77)  # this GPU cannot run the stage (stage 08 needs a Hopper): said above, not a failure
    if(suffix STREQUAL "" AND EXISTS "${exe}_cpu")  # its CPU twin can, at a small size
      execute_process(COMMAND "${exe}_cpu" --brief RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
      string(STRIP "${out}${err}" text)
      message("  instead, its CPU twin (timings are not GPU performance): ${text}")
      if(NOT rc EQUAL 0)
        list(APPEND failed ${id})
      endif()
    endif()
    continue()
  endif()
  if(NOT rc EQUAL 0)
    list(APPEND failed ${id})
  endif()
endforeach()
if(failed)
  message(FATAL_ERROR "\nThese stages failed: ${failed}")
endif()
message("\nEvery stage passed its check. Run any demo with --help for its options, or without --brief for the full report.")
