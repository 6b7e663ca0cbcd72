// Row-major single-precision matrix products through OpenBLAS, the only place kernels/cpu
// talks to BLAS.
#pragma once

#include <cstdint>

namespace fsdpd::cpu {

// C[M, N] = alpha · op(A) · op(B) + beta · C, all row-major, op(X) = Xᵀ when transpose_x.
// lda, ldb, ldc are the row strides of A, B and C as stored.
void Gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha,
          const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
          int64_t ldc);

}  // namespace fsdpd::cpu
