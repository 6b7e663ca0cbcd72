// SwiGLU on bf16 activations with fp32 math (worker/backend/ops.h, SwigluForward): each row of
// gate_up[rows, 2·ffn] holds gate (the first ffn values) then up; out[rows, ffn] =
// silu(gate) · up. SiLU is silu_math.cuh's, the one the SiLU kernels use.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"

namespace fsdpd::cuda {

absl::Status SwigluForward(const __nv_bfloat16* gate_up, int64_t rows, int64_t ffn,
                           __nv_bfloat16* out, cudaStream_t stream);

// dgate_up[rows, 2·ffn] overwritten: dgate = dout · up · silu'(gate), dup = dout · silu(gate).
// dgate_up may be gate_up itself (each element is read before it is written). With out not
// null, also out = silu(gate) · up with the bits SwigluForward gives, from the same read.
absl::Status SwigluBackward(const __nv_bfloat16* dout, const __nv_bfloat16* gate_up, int64_t rows,
                            int64_t ffn, __nv_bfloat16* dgate_up, __nv_bfloat16* out,
                            cudaStream_t stream);

}  // namespace fsdpd::cuda
