#include "worker/profiler/profiling_ops.h"

namespace fsdpd {

absl::Status ProfilingOps::EmbeddingForward(const Tensor& weight, const Tensor& tokens,
                                            const Tensor& out, Stream& stream) {
  return Run(
      "embedding_forward", stream, {&weight, &tokens},
      [&] { return inner_->EmbeddingForward(weight, tokens, out, stream); },
      [&] { return EmbeddingForwardCost(weight, tokens, out); });
}

absl::Status ProfilingOps::EmbeddingBackward(const Tensor& dout, const Tensor& tokens,
                                             const Tensor& dweight, Stream& stream) {
  return Run(
      "embedding_backward", stream, {&dout, &tokens, &dweight},
      [&] { return inner_->EmbeddingBackward(dout, tokens, dweight, stream); },
      [&] { return EmbeddingBackwardCost(dout, tokens, dweight); });
}

absl::Status ProfilingOps::RmsNormForward(const Tensor& x, const Tensor& weight, double eps,
                                          const Tensor& out, const Tensor& rstd,
                                          const Tensor& out_amax, Stream& stream) {
  return Run(
      "rmsnorm_forward", stream, {&x, &weight},
      [&] { return inner_->RmsNormForward(x, weight, eps, out, rstd, out_amax, stream); },
      [&] { return RmsNormForwardCost(x, weight, out, rstd); });
}

absl::Status ProfilingOps::RmsNormBackward(const Tensor& dout, const Tensor& x,
                                           const Tensor& weight, const Tensor& rstd,
                                           const Tensor& dx, Write dx_write, const Tensor& dweight,
                                           Write dweight_write, const Tensor& dx_amax,
                                           Stream& stream) {
  return Run(
      "rmsnorm_backward", stream, {&dout, &x, &weight, &rstd},
      [&] {
        return inner_->RmsNormBackward(dout, x, weight, rstd, dx, dx_write, dweight, dweight_write,
                                       dx_amax, stream);
      },
      [&] { return RmsNormBackwardCost(dout, x, weight, rstd, dx, dx_write, dweight); });
}

absl::Status ProfilingOps::LinearForward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                         const Tensor& out, Stream& stream) {
  return Run(
      "linear_forward", stream, {&x, &weight, &bias},
      [&] { return inner_->LinearForward(x, weight, bias, out, stream); },
      [&] { return LinearForwardCost(x, weight, bias, out); });
}

absl::Status ProfilingOps::LinearBackward(const Tensor& dout, const Tensor& x, const Tensor& weight,
                                          const Tensor& dx, const Tensor& dweight,
                                          const Tensor& dbias, Write grad_write, Stream& stream) {
  return Run(
      "linear_backward", stream, {&dout, &x, &weight},
      [&] {
        return inner_->LinearBackward(dout, x, weight, dx, dweight, dbias, grad_write, stream);
      },
      [&] { return LinearBackwardCost(dout, x, weight, dx, dweight, dbias, grad_write); });
}

absl::Status ProfilingOps::Fp8LinearForward(const Tensor& x, const Tensor& weight,
                                            const Tensor& bias, const Tensor& out,
                                            const Fp8OperandAmax& amax, Stream& stream) {
  return Run(
      "fp8_linear_forward", stream, {&x, &weight, &bias},
      [&] { return inner_->Fp8LinearForward(x, weight, bias, out, amax, stream); },
      [&] { return LinearForwardCost(x, weight, bias, out); });
}

absl::Status ProfilingOps::Fp8LinearBackward(const Tensor& dout, const Tensor& x,
                                             const Tensor& weight, const Tensor& dx,
                                             const Tensor& dweight, const Tensor& dbias,
                                             Write grad_write, const Fp8OperandAmax& amax,
                                             Stream& stream) {
  return Run(
      "fp8_linear_backward", stream, {&dout, &x, &weight},
      [&] {
        return inner_->Fp8LinearBackward(dout, x, weight, dx, dweight, dbias, grad_write, amax,
                                         stream);
      },
      [&] { return LinearBackwardCost(dout, x, weight, dx, dweight, dbias, grad_write); });
}

absl::Status ProfilingOps::AttentionForward(const Tensor& qkv, int64_t heads, int64_t kv_heads,
                                            bool causal, const Tensor& out, const Tensor& lse,
                                            Stream& stream) {
  return Run(
      "attention_forward", stream, {&qkv},
      [&] { return inner_->AttentionForward(qkv, heads, kv_heads, causal, out, lse, stream); },
      [&] { return AttentionForwardCost(qkv, causal, out, lse); });
}

absl::Status ProfilingOps::AttentionBackward(const Tensor& dout, const Tensor& qkv,
                                             const Tensor& out, const Tensor& lse, int64_t heads,
                                             int64_t kv_heads, bool causal, const Tensor& dqkv,
                                             Stream& stream) {
  return Run(
      "attention_backward", stream, {&dout, &qkv, &out, &lse},
      [&] {
        return inner_->AttentionBackward(dout, qkv, out, lse, heads, kv_heads, causal, dqkv,
                                         stream);
      },
      [&] { return AttentionBackwardCost(dout, qkv, out, lse, causal, dqkv); });
}

absl::Status ProfilingOps::Rotary(const Tensor& qkv, int64_t heads, int64_t kv_heads, double theta,
                                  bool inverse, Stream& stream) {
  return Run(
      inverse ? "rotary_backward" : "rotary_forward", stream, {&qkv},
      [&] { return inner_->Rotary(qkv, heads, kv_heads, theta, inverse, stream); },
      [&] { return RotaryCost(qkv, heads, kv_heads); });
}

absl::Status ProfilingOps::SwigluForward(const Tensor& gate_up, const Tensor& out, Stream& stream) {
  return Run(
      "swiglu_forward", stream, {&gate_up},
      [&] { return inner_->SwigluForward(gate_up, out, stream); },
      [&] { return SwigluForwardCost(gate_up, out); });
}

absl::Status ProfilingOps::SwigluBackward(const Tensor& dout, const Tensor& gate_up,
                                          const Tensor& dgate_up, const Tensor& out,
                                          Stream& stream) {
  return Run(
      "swiglu_backward", stream, {&dout, &gate_up},
      [&] { return inner_->SwigluBackward(dout, gate_up, dgate_up, out, stream); },
      [&] { return SwigluBackwardCost(dout, gate_up, dgate_up, out); });
}

absl::Status ProfilingOps::SiluForward(const Tensor& x, const Tensor& out, const Tensor& out_amax,
                                       Stream& stream) {
  return Run(
      "silu_forward", stream, {&x}, [&] { return inner_->SiluForward(x, out, out_amax, stream); },
      [&] { return SiluForwardCost(x, out); });
}

absl::Status ProfilingOps::SiluBackward(const Tensor& dout, const Tensor& x, const Tensor& dx,
                                        const Tensor& out, const Tensor& dx_amax,
                                        const Tensor& out_amax, Stream& stream) {
  return Run(
      "silu_backward", stream, {&dout, &x},
      [&] { return inner_->SiluBackward(dout, x, dx, out, dx_amax, out_amax, stream); },
      [&] { return SiluBackwardCost(dout, x, dx, out); });
}

absl::Status ProfilingOps::Add(const Tensor& a, const Tensor& b, const Tensor& out,
                               Stream& stream) {
  return Run(
      "add", stream, {&a, &b}, [&] { return inner_->Add(a, b, out, stream); },
      [&] { return AddCost(a, b, out); });
}

absl::Status ProfilingOps::HeadCrossEntropy(const Tensor& x, const Tensor& head,
                                            const Tensor& targets, double loss_scale,
                                            const Tensor& loss, const Tensor& dx,
                                            const Tensor& dhead, Stream& stream) {
  return Run(
      "head_cross_entropy", stream, {&x, &head, &targets},
      [&] {
        return inner_->HeadCrossEntropy(x, head, targets, loss_scale, loss, dx, dhead, stream);
      },
      [&] { return HeadCrossEntropyCost(x, head, targets, dx, dhead); });
}

absl::Status ProfilingOps::Cast(const Tensor& src, const Tensor& dst, Stream& stream) {
  return Run(
      "cast", stream, {&src, &dst}, [&] { return inner_->Cast(src, dst, stream); },
      [&] { return CastCost(src, dst); });
}

absl::Status ProfilingOps::RoundToBf16(const Tensor& x, Stream& stream) {
  return Run(
      "round_to_bf16", stream, {&x}, [&] { return inner_->RoundToBf16(x, stream); },
      [&] { return RoundToBf16Cost(x); });
}

absl::Status ProfilingOps::Fill(const Tensor& x, float value, Stream& stream) {
  return Run(
      "fill", stream, {&x}, [&] { return inner_->Fill(x, value, stream); },
      [&] { return FillCost(x); });
}

absl::Status ProfilingOps::Scale(const Tensor& x, float factor, Stream& stream) {
  return Run(
      "scale", stream, {&x}, [&] { return inner_->Scale(x, factor, stream); },
      [&] { return ScaleCost(x); });
}

absl::Status ProfilingOps::SumOfSquares(const Tensor& x, const Tensor& result, Stream& stream) {
  return Run(
      "sum_of_squares", stream, {&x}, [&] { return inner_->SumOfSquares(x, result, stream); },
      [&] { return SumOfSquaresCost(x, result); });
}

absl::Status ProfilingOps::AdamW(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                                 const Tensor& exp_avg_sq, const AdamWParams& params,
                                 Stream& stream) {
  return Run(
      "adamw", stream, {&param, &grad, &exp_avg, &exp_avg_sq},
      [&] { return inner_->AdamW(param, grad, exp_avg, exp_avg_sq, params, stream); },
      [&] { return AdamWCost(param, grad, exp_avg, exp_avg_sq); });
}

absl::Status ProfilingOps::AdamWWithGradSquareSum(const Tensor& param, const Tensor& grad,
                                                  const Tensor& exp_avg, const Tensor& exp_avg_sq,
                                                  const AdamWParams& params,
                                                  const Tensor& grad_square_sum, Stream& stream) {
  return Run(
      "adamw", stream, {&param, &grad, &exp_avg, &exp_avg_sq},
      [&] {
        return inner_->AdamWWithGradSquareSum(param, grad, exp_avg, exp_avg_sq, params,
                                              grad_square_sum, stream);
      },
      [&] {
        // The sum adds a multiply-add an element and reads nothing more.
        OpCost cost = AdamWCost(param, grad, exp_avg, exp_avg_sq);
        cost.flops += 2.0 * static_cast<double>(grad.numel());
        return cost;
      });
}

absl::Status ProfilingOps::AdamWSplitMaster(const Tensor& high, const Tensor& low,
                                            const Tensor& grad, const Tensor& exp_avg,
                                            const Tensor& exp_avg_sq, const AdamWParams& params,
                                            const Tensor& grad_square_sum, Stream& stream) {
  return Run(
      "adamw", stream, {&high, &low, &grad, &exp_avg, &exp_avg_sq},
      [&] {
        return inner_->AdamWSplitMaster(high, low, grad, exp_avg, exp_avg_sq, params,
                                        grad_square_sum, stream);
      },
      [&] {
        // The halves move the bytes of one fp32 master; the sum adds a multiply-add an element.
        const Tensor master{high.data, DType::kF32, high.shape};
        OpCost cost = AdamWCost(master, grad, exp_avg, exp_avg_sq);
        if (grad_square_sum.data != nullptr) cost.flops += 2.0 * static_cast<double>(grad.numel());
        return cost;
      });
}

}  // namespace fsdpd
