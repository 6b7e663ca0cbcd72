// The Ops of the CPU backend: shape and dtype checks, then the fp32 reference kernels of
// kernels/cpu. Work runs inline on the calling thread, so the stream argument only orders it.
#pragma once

#include "worker/backend/ops.h"

namespace fsdpd {

class CpuOps : public Ops {
 public:
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
};

}  // namespace fsdpd
