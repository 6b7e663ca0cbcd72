// RMSNorm in fp32 (nn.RMSNorm with elementwise affine): y = x · rsqrt(mean(x²) + eps) · w.
#pragma once

#include <cstdint>

namespace fsdpd::cpu {

// x, out [rows, dim]; weight [dim]; rstd [rows] saved for backward.
void RmsNormForward(const float* x, const float* weight, int64_t rows, int64_t dim, double eps,
                    float* out, float* rstd);

// dx [rows, dim] overwritten, or with accumulate_dx added to; dweight [dim] accumulated, or
// overwritten with accumulate_dweight false.
void RmsNormBackward(const float* dout, const float* x, const float* weight, const float* rstd,
                     int64_t rows, int64_t dim, bool accumulate_dx, float* dx, float* dweight,
                     bool accumulate_dweight = true);

}  // namespace fsdpd::cpu
