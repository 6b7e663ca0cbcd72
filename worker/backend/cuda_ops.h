// The Ops of the CUDA backend, behind CheckedOps: dtype checks, then the kernels of kernels/cuda on
// the stream given. Dtypes (the model allocates by Backend::activation_dtype(), kBF16 here):
//   - activations and their gradients (x, out, dout, dx, qkv, dqkv): bf16;
//   - parameters (weight, bias, head): bf16 views into the unsharded parameter buffer;
//   - parameter gradients (dweight, dbias, dhead): fp32, accumulated. The GEMMs accumulate
//     straight into them (beta = 1, fp32 output), so no bf16 gradient copy exists and the
//     FSDP layer reduce-scatters the fp32 buffer as it is;
//   - statistics (rstd, lse) and the loss: fp32; token ids: int32, checked by the caller on
//     the host (the model does, in BeginStep) since checking them here would need a sync;
//   - the FP8 linear ops take the same dtypes as the bf16 ones; their fp8 copies and scales live
//     in the stream's scratch (kernels/cuda/fp8_linear.h);
//   - Cast, Fill, Scale, SumOfSquares, Add take fp32 or bf16; AdamW is fp32 throughout.
// Ops that need temporary memory take it from a per-stream scratch buffer that only grows
// (the stream is synchronised once when it does), so concurrent streams never share scratch.
// The reductions (RMSNorm weight gradient, embedding scatter-add, sum of squares, loss mean)
// run in a fixed order: the same inputs give the same bits.
// The launchers of kernels/cuda trust the contract checked here and in CheckedOps (pointers
// present, eps and step valid) and check only their launch limits (grid sizes, scratch sizes).
#pragma once

#include <cuda_runtime_api.h>

#include <map>
#include <memory>

#include "absl/status/statusor.h"
#include "kernels/cuda/adamw.h"
#include "kernels/cuda/fp8_gemm.h"
#include "kernels/cuda/gemm.h"
#include "worker/backend/cuda_allocator.h"
#include "worker/backend/ops.h"

namespace fsdpd {

class CudaOps : public Ops {
 public:
  // The allocator and gemms outlive the ops (the backend owns them). A positive
  // optimizer_grid_limit caps the blocks of AdamW's kernels (CudaBackendConfig::optimizer_sms).
  // fp8_gemm is null on a device without FP8 tensor cores: the Fp8Linear ops then fail.
  CudaOps(CudaAllocator* allocator, cuda::Gemm* gemm, int64_t optimizer_grid_limit = 0,
          cuda::Fp8Gemm* fp8_gemm = nullptr);
  ~CudaOps() override;

  FSDPD_OPS_OVERRIDES

 private:
  struct Scratch {
    void* data = nullptr;
    int64_t bytes = 0;
  };
  // At least `bytes` of scratch owned by `stream`.
  absl::StatusOr<void*> ScratchFor(cudaStream_t stream, int64_t bytes);
  cuda::AdamWStepParams StepParams(const AdamWParams& params) const;

  CudaAllocator* allocator_;
  cuda::Gemm* gemm_;
  cuda::Fp8Gemm* fp8_gemm_;
  int64_t optimizer_grid_limit_;
  std::map<cudaStream_t, Scratch> scratch_;
};

// The cudaStream_t behind a Stream of the CUDA backend; an error for any other stream.
absl::StatusOr<cudaStream_t> CudaStreamOf(Stream& stream);

}  // namespace fsdpd
