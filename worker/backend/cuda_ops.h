// The Ops of the CUDA backend: shape and dtype checks, then the kernels of kernels/cuda on the
// stream given. Dtypes (the model allocates by Backend::activation_dtype(), kBF16 here):
//   - activations and their gradients (x, out, dout, dx, qkv, dqkv): bf16;
//   - parameters (weight, bias, head): bf16 views into the unsharded parameter buffer;
//   - parameter gradients (dweight, dbias, dhead): fp32, accumulated. The GEMMs accumulate
//     straight into them (beta = 1, fp32 output), so no bf16 gradient copy exists and the
//     FSDP layer reduce-scatters the fp32 buffer as it is;
//   - statistics (rstd, lse) and the loss: fp32; token ids: int32, checked by the caller on
//     the host (the model does, in BeginStep) since checking them here would need a sync;
//   - Cast, Fill, Scale, SumOfSquares, Add take fp32 or bf16; AdamW is fp32 throughout.
// Ops that need temporary memory take it from a per-stream scratch buffer that only grows
// (the stream is synchronised once when it does), so concurrent streams never share scratch.
// The reductions (RMSNorm weight gradient, embedding scatter-add, sum of squares, loss mean)
// run in a fixed order: the same inputs give the same bits.
#pragma once

#include <cuda_runtime_api.h>

#include <map>
#include <memory>

#include "absl/status/statusor.h"
#include "kernels/cuda/gemm.h"
#include "worker/backend/cuda_allocator.h"
#include "worker/backend/ops.h"

namespace fsdpd {

class CudaOps : public Ops {
 public:
  // The allocator and gemm outlive the ops (the backend owns all three).
  CudaOps(CudaAllocator* allocator, cuda::Gemm* gemm);
  ~CudaOps() override;

  absl::Status EmbeddingForward(const Tensor& weight, const Tensor& tokens, const Tensor& out,
                                Stream& stream) override;
  absl::Status EmbeddingBackward(const Tensor& dout, const Tensor& tokens, const Tensor& dweight,
                                 Stream& stream) override;
  absl::Status RmsNormForward(const Tensor& x, const Tensor& weight, double eps, const Tensor& out,
                              const Tensor& rstd, Stream& stream) override;
  absl::Status RmsNormBackward(const Tensor& dout, const Tensor& x, const Tensor& weight,
                               const Tensor& rstd, const Tensor& dx, const Tensor& dweight,
                               Stream& stream) override;
  absl::Status LinearForward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                             const Tensor& out, Stream& stream) override;
  absl::Status LinearBackward(const Tensor& dout, const Tensor& x, const Tensor& weight,
                              const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                              Stream& stream) override;
  absl::Status AttentionForward(const Tensor& qkv, int64_t heads, bool causal, const Tensor& out,
                                const Tensor& lse, Stream& stream) override;
  absl::Status AttentionBackward(const Tensor& dout, const Tensor& qkv, const Tensor& out,
                                 const Tensor& lse, int64_t heads, bool causal, const Tensor& dqkv,
                                 Stream& stream) override;
  absl::Status SiluForward(const Tensor& x, const Tensor& out, Stream& stream) override;
  absl::Status SiluBackward(const Tensor& dout, const Tensor& x, const Tensor& dx,
                            Stream& stream) override;
  absl::Status Add(const Tensor& a, const Tensor& b, const Tensor& out, Stream& stream) override;
  absl::Status HeadCrossEntropy(const Tensor& x, const Tensor& head, const Tensor& targets,
                                double loss_scale, const Tensor& loss, const Tensor& dx,
                                const Tensor& dhead, Stream& stream) override;
  absl::Status Cast(const Tensor& src, const Tensor& dst, Stream& stream) override;
  absl::Status RoundToBf16(const Tensor& x, Stream& stream) override;
  absl::Status Fill(const Tensor& x, float value, Stream& stream) override;
  absl::Status Scale(const Tensor& x, float factor, Stream& stream) override;
  absl::Status SumOfSquares(const Tensor& x, const Tensor& result, Stream& stream) override;
  absl::Status AdamW(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                     const Tensor& exp_avg_sq, const AdamWParams& params, Stream& stream) override;

 private:
  struct Scratch {
    void* data = nullptr;
    int64_t bytes = 0;
  };
  // At least `bytes` of scratch owned by `stream`.
  absl::StatusOr<void*> ScratchFor(cudaStream_t stream, int64_t bytes);

  CudaAllocator* allocator_;
  cuda::Gemm* gemm_;
  std::map<cudaStream_t, Scratch> scratch_;
};

// The cudaStream_t behind a Stream of the CUDA backend; an error for any other stream.
absl::StatusOr<cudaStream_t> CudaStreamOf(Stream& stream);

}  // namespace fsdpd
