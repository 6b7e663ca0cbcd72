// A linear layer's products in FP8 (Ops::Fp8LinearForward/Backward, worker/backend/ops.h), from
// bf16 operands: each operand's amax, its scale, its fp8 copies (kernels/cuda/fp8.h), then the
// products (kernels/cuda/fp8_gemm.h), all on the caller's stream with nothing read back.
//
// Every call quantizes its own operands with scales from their amax in that call (current
// scaling). Where the kernel that produced x or dout left its amax (x_amax, dout_amax: RMSNorm's
// and SiLU's kernels can, kernels/cuda/amax.cuh), the scale comes from that device float;
// otherwise the amax is a pass of its own over the operand, before the cast (attention's output,
// its input gradient, the residual stream's gradient, and every weight). The weight is
// quantized in forward and again in backward (its transpose then), since FSDP may free the
// gathered unit in between. bench/RESULTS.md ("FP8 linear layers in the step") says what these
// extra passes cost.
//
// `scratch` is device memory of at least the ...ScratchBytes of the shape, 256-byte aligned: the
// operands' amax, scale and descale (16 bytes apart, as cuBLASLt wants the descales), their
// fp8 copies and the bias gradient's partial sums (kernels/cuda/column_sum.h). Calls on one stream
// may share it; calls on different streams may not.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/fp8_gemm.h"

namespace fsdpd::cuda {

int64_t Fp8LinearForwardScratchBytes(int64_t m, int64_t n, int64_t k);
int64_t Fp8LinearBackwardScratchBytes(int64_t m, int64_t n, int64_t k);

// out[m, n] = fp8(x)[m, k] · fp8(weight)[n, k]ᵀ (+ bias[n], added to the bf16 product), bf16;
// x and weight e4m3. x_amax: max |x| on the device, or nullptr to compute it here.
absl::Status Fp8LinearForward(Fp8Gemm& gemm, const __nv_bfloat16* x, const __nv_bfloat16* weight,
                              const __nv_bfloat16* bias, int64_t m, int64_t n, int64_t k,
                              __nv_bfloat16* out, const float* x_amax, void* scratch,
                              cudaStream_t stream);

// dx[m, k] = fp8(dout) · fp8(weight), bf16, overwritten (skipped when nullptr);
// dweight[n, k] (+)= fp8(dout)ᵀ · fp8(x), fp32 (skipped when nullptr); dbias[n] (+)= Σ_rows dout
// from the bf16 dout (skipped when nullptr); accumulate false overwrites dweight and dbias.
// dout e5m2, x and weight e4m3. dout_amax, x_amax: max |dout|, max |x| on the device, or
// nullptr to compute them here.
absl::Status Fp8LinearBackward(Fp8Gemm& gemm, const __nv_bfloat16* dout, const __nv_bfloat16* x,
                               const __nv_bfloat16* weight, int64_t m, int64_t n, int64_t k,
                               __nv_bfloat16* dx, float* dweight, float* dbias, bool accumulate,
                               const float* dout_amax, const float* x_amax, void* scratch,
                               cudaStream_t stream);

}  // namespace fsdpd::cuda
