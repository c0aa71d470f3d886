// The rotation of one rotary pair, shared by rope.cu's kernels and the skinny GEMM's rope
// epilogue (gemv.cu) so that every path rounds alike. nvcc only.
#pragma once

namespace troupe::cuda {

/// (x1, x2) rotated by the angle whose cosine and sine are c and s, products and sums rounded
/// separately (no FMA contraction), as the CPU reference computes them.
__device__ __forceinline__ void rotate_pair(float x1, float x2, float c, float s, float& y1,
                                            float& y2) {
  y1 = __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s));
  y2 = __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s));
}

}  // namespace troupe::cuda
