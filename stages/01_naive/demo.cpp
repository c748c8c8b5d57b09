/**
 * \file stages/01_naive/demo.cpp
 * \brief Stage 01's demo: runs naive attention, checks it, times it, and shows the
 *        size of the N×N matrix it has to keep in device memory (see describe.cpp).
 *
 * \code
 * stage01_naive                                   # B=4 H=32 N=4096 d=64
 * stage01_naive --seq-q 1000 --seq-kv 257 --dim 128 --causal
 * stage01_naive --batch 8 --heads 64 --seq-q 65536 --seq-kv 65536   # refused: S needs 8 TiB
 * \endcode
 */
#include "common/demo.h"
#include "stages/01_naive/naive_attention.h"

/// Runs stage 01 through the shared demo driver.
int main(int argc, char** argv) { return fa::run_stage_demo(argc, argv, fa::naive::describe()); }
