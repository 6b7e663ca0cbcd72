// nn.Linear in fp32: out = x · weightᵀ + bias, and its gradients.
#pragma once

#include <cstdint>

namespace fsdpd::cpu {

// x[rows, in], weight[out, in], bias[out] or nullptr, out[rows, out] (overwritten).
void LinearForward(const float* x, const float* weight, const float* bias, int64_t rows,
                   int64_t in_features, int64_t out_features, float* out);

// dx[rows, in] = dout · weight (overwritten; skipped when nullptr);
// dweight[out, in] += doutᵀ · x; dbias[out] += Σ_rows dout (skipped when nullptr); with
// accumulate false, dweight and dbias are overwritten instead.
void LinearBackward(const float* dout, const float* x, const float* weight, int64_t rows,
                    int64_t in_features, int64_t out_features, float* dx, float* dweight,
                    float* dbias, bool accumulate = true);

}  // namespace fsdpd::cpu
