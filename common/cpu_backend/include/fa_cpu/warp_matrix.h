/**
 * \file warp_matrix.h
 * \brief CPU backend: the tensor-core instructions that stage 06 uses, `ldmatrix` and
 *        `mma.sync.aligned.m16n8k16`, and its store twin `stmatrix` (sm_90, stage 13), as
 *        warp collectives that follow the PTX ISA's fragment layouts exactly.
 *
 * Each is a rendezvous of the whole warp (fa_cpu::warp_matrix): every lane posts its
 * operand registers; the last lane to arrive rebuilds the matrices from all 32 lanes'
 * registers by the ISA's layout, computes, and hands each lane its result registers by
 * the same layout. A kernel that puts a value in the wrong lane or the wrong register
 * therefore computes the wrong matrix here, just as on the GPU.
 *
 * The layouts (PTX ISA, "Warp-level matrix fragments"; g = lane / 4, t = lane % 4):
 *
 *     ldmatrix .x1/.x2/.x4: lane 8·i + r gives the address of row r of matrix i
 *         (16 bytes: 8 elements of 16 bits). Register i of lane L receives row L/4,
 *         columns 2·(L%4) and 2·(L%4)+1 of matrix i (the lower column in the low half).
 *         With .trans it receives column L/4, rows 2·(L%4) and 2·(L%4)+1 instead.
 *     stmatrix .x1/.x2/.x4: the same layout, the other way: lane 8·i + r gives the
 *         address of row r of matrix i, and register i of lane L holds row L/4, columns
 *         2·(L%4) and 2·(L%4)+1 of it; with .trans, column L/4, rows 2·(L%4) and 2·(L%4)+1.
 *     mma m16n8k16, A (16×16, row-major), 4 registers of two 16-bit values:
 *         a0,a1: (g, 2t..2t+1)  a2,a3: (g+8, 2t..2t+1)  a4,a5: (g, 2t+8..)  a6,a7: (g+8, 2t+8..)
 *     B (16×8, k × n), 2 registers:   b0,b1: (k = 2t..2t+1, n = g)   b2,b3: (k = 2t+8.., n = g)
 *     C, D (16×8, fp32), 4 floats:    c0,c1: (g, 2t..2t+1)           c2,c3: (g+8, 2t..2t+1)
 *
 * Numerics: the 16-bit products are exact in fp32; the CPU sums them in double and rounds
 * once, where the tensor core rounds its own way. Results therefore agree with the GPU
 * within fp32 accumulation rounding, not bit for bit (the hardware test checks exactly
 * that). ldmatrix and stmatrix move bits and agree exactly.
 */
#pragma once

#include <cstdint>

namespace fa_cpu {

/**
 * ldmatrix.sync.aligned.m8n8.x{count}[.trans].shared.b16: `count` (1, 2 or 4) 8×8
 * matrices of 16-bit elements. `row` is this lane's row address (used by lanes
 * 0 .. 8·count−1, 16-byte aligned); `regs` receives this lane's `count` registers.
 */
void ldmatrix(int count, bool trans, const void* row, std::uint32_t* regs, const char* file, int line);

/**
 * stmatrix.sync.aligned.m8n8.x{count}[.trans].shared.b16: `count` (1, 2 or 4) 8×8 matrices
 * of 16-bit elements from the warp's registers into shared memory. `row` is this lane's row
 * address (used by lanes 0 .. 8·count−1, 16-byte aligned); `regs` holds this lane's `count`
 * registers.
 */
void stmatrix(int count, bool trans, void* row, const std::uint32_t* regs, const char* file, int line);

/// The element type of mma.sync's A and B operands.
enum class MmaType : std::uint8_t { F16, BF16 };

/**
 * mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32: D = A·B + C for the
 * warp, each lane passing its fragments (layouts above). `d` may alias `c`.
 */
void mma_m16n8k16(MmaType type, float* d, const std::uint32_t* a, const std::uint32_t* b, const float* c,
                  const char* file, int line);

}  // namespace fa_cpu
