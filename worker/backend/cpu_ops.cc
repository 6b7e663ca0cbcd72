#include "worker/backend/cpu_ops.h"

#include <cmath>
#include <cstring>
#include <initializer_list>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/cpu/adamw.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/fp8.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/rotary.h"
#include "kernels/cpu/silu.h"
#include "worker/backend/op_arguments.h"

// Shapes, counts and aliasing are checked once for every backend by CheckedOps, which the
// backend puts in front of these ops; here only what is the CPU's: every floating-point tensor
// is f32 (bf16 only where an op converts), and token ids lie inside the table (the ids are on
// the host, so checking them costs no sync).

namespace fsdpd {
namespace {

// Each present tensor (optional ones may have no data) is f32.
absl::Status AllFloat(const OpArguments& check,
                      std::initializer_list<std::pair<const Tensor*, const char*>> tensors) {
  for (const auto& [tensor, name] : tensors) {
    if (tensor->data == nullptr) continue;
    FSDPD_RETURN_IF_ERROR(check.Typed(*tensor, name, DType::kF32));
  }
  return absl::OkStatus();
}

absl::Status ValidIds(const OpArguments& check, const Tensor& ids, const char* name,
                      int64_t limit) {
  const int64_t invalid = cpu::FindInvalidToken(ids.as<int32_t>(), ids.numel(), limit);
  if (invalid >= 0) {
    return check.Error(absl::StrCat(name, "[", invalid, "] = ", ids.as<int32_t>()[invalid],
                                    " is outside [0, ", limit, ")"));
  }
  return absl::OkStatus();
}

float* OrNull(const Tensor& t) { return t.data != nullptr ? t.as<float>() : nullptr; }

// amax[0] = max(amax[0], max |values|) where amax is present, a NaN winning as on the device
// (Fp8OperandAmax in worker/backend/ops.h).
void RaiseAmax(const Tensor& amax, const Tensor& values) {
  if (amax.data == nullptr) return;
  const float found = cpu::MaxAbs(values.as<float>(), values.numel());
  float& target = *amax.as<float>();
  if (std::isnan(found) || found > target) target = found;
}

}  // namespace

absl::Status CpuOps::EmbeddingForward(const Tensor& weight, const Tensor& tokens, const Tensor& out,
                                      Stream&) {
  OpArguments check("EmbeddingForward");
  FSDPD_RETURN_IF_ERROR(AllFloat(check, {{&weight, "weight"}, {&out, "out"}}));
  FSDPD_RETURN_IF_ERROR(ValidIds(check, tokens, "tokens", weight.shape[0]));
  cpu::EmbeddingForward(weight.as<float>(), tokens.as<int32_t>(), tokens.numel(), weight.shape[1],
                        out.as<float>());
  return absl::OkStatus();
}

absl::Status CpuOps::EmbeddingBackward(const Tensor& dout, const Tensor& tokens,
                                       const Tensor& dweight, Stream&) {
  OpArguments check("EmbeddingBackward");
  FSDPD_RETURN_IF_ERROR(AllFloat(check, {{&dweight, "dweight"}, {&dout, "dout"}}));
  FSDPD_RETURN_IF_ERROR(ValidIds(check, tokens, "tokens", dweight.shape[0]));
  cpu::EmbeddingBackward(dout.as<float>(), tokens.as<int32_t>(), tokens.numel(), dweight.shape[1],
                         dweight.as<float>());
  return absl::OkStatus();
}

absl::Status CpuOps::RmsNormForward(const Tensor& x, const Tensor& weight, double eps,
                                    const Tensor& out, const Tensor& rstd, const Tensor& out_amax,
                                    Stream&) {
  OpArguments check("RmsNormForward");
  FSDPD_RETURN_IF_ERROR(AllFloat(check, {{&x, "x"}, {&weight, "weight"}, {&out, "out"}}));
  cpu::RmsNormForward(x.as<float>(), weight.as<float>(), RowsOf(x), x.shape.back(), eps,
                      out.as<float>(), rstd.as<float>());
  RaiseAmax(out_amax, out);
  return absl::OkStatus();
}

absl::Status CpuOps::RmsNormBackward(const Tensor& dout, const Tensor& x, const Tensor& weight,
                                     const Tensor& rstd, const Tensor& dx, Write dx_write,
                                     const Tensor& dweight, Write dweight_write,
                                     const Tensor& dx_amax, Stream&) {
  OpArguments check("RmsNormBackward");
  FSDPD_RETURN_IF_ERROR(AllFloat(
      check,
      {{&x, "x"}, {&dout, "dout"}, {&weight, "weight"}, {&dx, "dx"}, {&dweight, "dweight"}}));
  cpu::RmsNormBackward(dout.as<float>(), x.as<float>(), weight.as<float>(), rstd.as<float>(),
                       RowsOf(x), x.shape.back(), dx_write == Write::kAccumulate, dx.as<float>(),
                       dweight.as<float>(), dweight_write == Write::kAccumulate);
  RaiseAmax(dx_amax, dx);
  return absl::OkStatus();
}

namespace {

// nn.Linear's products, fp32 (kernels/cpu/linear.h) or FP8 emulated (kernels/cpu/fp8.h): the
// same arguments, checked the same way.
using LinearForwardFunction = absl::FunctionRef<void(const float*, const float*, const float*,
                                                     int64_t, int64_t, int64_t, float*)>;
using LinearBackwardFunction =
    absl::FunctionRef<void(const float*, const float*, const float*, int64_t, int64_t, int64_t,
                           float*, float*, float*, bool)>;

absl::Status RunLinearForward(const char* op, LinearForwardFunction forward, const Tensor& x,
                              const Tensor& weight, const Tensor& bias, const Tensor& out) {
  OpArguments check(op);
  FSDPD_RETURN_IF_ERROR(
      AllFloat(check, {{&weight, "weight"}, {&x, "x"}, {&bias, "bias"}, {&out, "out"}}));
  forward(x.as<float>(), weight.as<float>(), OrNull(bias), RowsOf(x), weight.shape[1],
          weight.shape[0], out.as<float>());
  return absl::OkStatus();
}

absl::Status RunLinearBackward(const char* op, LinearBackwardFunction backward, const Tensor& dout,
                               const Tensor& x, const Tensor& weight, const Tensor& dx,
                               const Tensor& dweight, const Tensor& dbias, Write grad_write) {
  OpArguments check(op);
  FSDPD_RETURN_IF_ERROR(AllFloat(check, {{&weight, "weight"},
                                         {&x, "x"},
                                         {&dout, "dout"},
                                         {&dx, "dx"},
                                         {&dweight, "dweight"},
                                         {&dbias, "dbias"}}));
  backward(dout.as<float>(), x.as<float>(), weight.as<float>(), RowsOf(x), weight.shape[1],
           weight.shape[0], OrNull(dx), OrNull(dweight), OrNull(dbias),
           grad_write == Write::kAccumulate);
  return absl::OkStatus();
}

}  // namespace

absl::Status CpuOps::LinearForward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                   const Tensor& out, Stream&) {
  return RunLinearForward("LinearForward", cpu::LinearForward, x, weight, bias, out);
}

absl::Status CpuOps::LinearBackward(const Tensor& dout, const Tensor& x, const Tensor& weight,
                                    const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                                    Write grad_write, Stream&) {
  return RunLinearBackward("LinearBackward", cpu::LinearBackward, dout, x, weight, dx, dweight,
                           dbias, grad_write);
}

absl::Status CpuOps::Fp8LinearForward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                      const Tensor& out, const Fp8OperandAmax& amax, Stream&) {
  const float* x_amax = OrNull(amax.x);
  return RunLinearForward(
      "Fp8LinearForward",
      [x_amax](const float* in, const float* w, const float* b, int64_t rows, int64_t in_features,
               int64_t out_features, float* product) {
        cpu::Fp8LinearForward(in, w, b, rows, in_features, out_features, product, x_amax);
      },
      x, weight, bias, out);
}

absl::Status CpuOps::Fp8LinearBackward(const Tensor& dout, const Tensor& x, const Tensor& weight,
                                       const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                                       Write grad_write, const Fp8OperandAmax& amax, Stream&) {
  const float* dout_amax = OrNull(amax.dout);
  const float* x_amax = OrNull(amax.x);
  return RunLinearBackward(
      "Fp8LinearBackward",
      [dout_amax, x_amax](const float* d, const float* in, const float* w, int64_t rows,
                          int64_t in_features, int64_t out_features, float* din, float* dw,
                          float* db, bool accumulate) {
        cpu::Fp8LinearBackward(d, in, w, rows, in_features, out_features, din, dw, db, accumulate,
                               dout_amax, x_amax);
      },
      dout, x, weight, dx, dweight, dbias, grad_write);
}

namespace {

// qkv[B, S, (heads + 2·kv_heads)·hd], as CheckedOps accepted it.
cpu::AttentionShape AttentionShapeOf(const Tensor& qkv, int64_t heads, int64_t kv_heads) {
  const int64_t head_dim = qkv.shape[2] / (heads + 2 * kv_heads);
  return cpu::AttentionShape{qkv.shape[0], qkv.shape[1], heads, heads * head_dim, kv_heads};
}

}  // namespace

absl::Status CpuOps::AttentionForward(const Tensor& qkv, int64_t heads, int64_t kv_heads,
                                      bool causal, const Tensor& out, const Tensor& lse, Stream&) {
  OpArguments check("AttentionForward");
  FSDPD_RETURN_IF_ERROR(AllFloat(check, {{&qkv, "qkv"}, {&out, "out"}}));
  cpu::AttentionForward(qkv.as<float>(), AttentionShapeOf(qkv, heads, kv_heads), causal,
                        out.as<float>(), lse.as<float>());
  return absl::OkStatus();
}

absl::Status CpuOps::AttentionBackward(const Tensor& dout, const Tensor& qkv, const Tensor& out,
                                       const Tensor& lse, int64_t heads, int64_t kv_heads,
                                       bool causal, const Tensor& dqkv, Stream&) {
  OpArguments check("AttentionBackward");
  FSDPD_RETURN_IF_ERROR(
      AllFloat(check, {{&qkv, "qkv"}, {&out, "out"}, {&dout, "dout"}, {&dqkv, "dqkv"}}));
  cpu::AttentionBackward(dout.as<float>(), qkv.as<float>(), out.as<float>(), lse.as<float>(),
                         AttentionShapeOf(qkv, heads, kv_heads), causal, dqkv.as<float>());
  return absl::OkStatus();
}

absl::Status CpuOps::Rotary(const Tensor& qkv, int64_t heads, int64_t kv_heads, double theta,
                            bool inverse, Stream&) {
  OpArguments check("Rotary");
  FSDPD_RETURN_IF_ERROR(AllFloat(check, {{&qkv, "qkv"}}));
  const int64_t head_dim = qkv.shape[2] / (heads + 2 * kv_heads);
  cpu::Rotary(qkv.as<float>(), {qkv.shape[0], qkv.shape[1], heads, kv_heads, head_dim}, theta,
              inverse);
  return absl::OkStatus();
}

absl::Status CpuOps::SwigluForward(const Tensor& gate_up, const Tensor& out, Stream&) {
  OpArguments check("SwigluForward");
  FSDPD_RETURN_IF_ERROR(AllFloat(check, {{&gate_up, "gate_up"}, {&out, "out"}}));
  cpu::SwigluForward(gate_up.as<float>(), RowsOf(gate_up), gate_up.shape.back() / 2,
                     out.as<float>());
  return absl::OkStatus();
}

absl::Status CpuOps::SwigluBackward(const Tensor& dout, const Tensor& gate_up,
                                    const Tensor& dgate_up, const Tensor& out, Stream&) {
  OpArguments check("SwigluBackward");
  FSDPD_RETURN_IF_ERROR(AllFloat(
      check, {{&gate_up, "gate_up"}, {&dout, "dout"}, {&dgate_up, "dgate_up"}, {&out, "out"}}));
  cpu::SwigluBackward(dout.as<float>(), gate_up.as<float>(), RowsOf(gate_up),
                      gate_up.shape.back() / 2, dgate_up.as<float>(), OrNull(out));
  return absl::OkStatus();
}

absl::Status CpuOps::SiluForward(const Tensor& x, const Tensor& out, const Tensor& out_amax,
                                 Stream&) {
  OpArguments check("SiluForward");
  FSDPD_RETURN_IF_ERROR(AllFloat(check, {{&x, "x"}, {&out, "out"}}));
  cpu::SiluForward(x.as<float>(), x.numel(), out.as<float>());
  RaiseAmax(out_amax, out);
  return absl::OkStatus();
}

absl::Status CpuOps::SiluBackward(const Tensor& dout, const Tensor& x, const Tensor& dx,
                                  const Tensor& out, const Tensor& dx_amax, const Tensor& out_amax,
                                  Stream&) {
  OpArguments check("SiluBackward");
  FSDPD_RETURN_IF_ERROR(AllFloat(check, {{&x, "x"}, {&dout, "dout"}, {&dx, "dx"}, {&out, "out"}}));
  cpu::SiluBackward(dout.as<float>(), x.as<float>(), x.numel(), dx.as<float>());
  if (out.data != nullptr) cpu::SiluForward(x.as<float>(), x.numel(), out.as<float>());
  RaiseAmax(dx_amax, dx);
  if (out.data != nullptr) RaiseAmax(out_amax, out);
  return absl::OkStatus();
}

absl::Status CpuOps::Add(const Tensor& a, const Tensor& b, const Tensor& out, Stream&) {
  OpArguments check("Add");
  FSDPD_RETURN_IF_ERROR(AllFloat(check, {{&a, "a"}, {&b, "b"}, {&out, "out"}}));
  cpu::Add(a.as<float>(), b.as<float>(), a.numel(), out.as<float>());
  return absl::OkStatus();
}

absl::Status CpuOps::HeadCrossEntropy(const Tensor& x, const Tensor& head, const Tensor& targets,
                                      double loss_scale, const Tensor& loss, const Tensor& dx,
                                      const Tensor& dhead, Stream&) {
  OpArguments check("HeadCrossEntropy");
  FSDPD_RETURN_IF_ERROR(
      AllFloat(check, {{&head, "head"}, {&x, "x"}, {&dx, "dx"}, {&dhead, "dhead"}}));
  const int64_t vocab = head.shape[0];
  FSDPD_RETURN_IF_ERROR(ValidIds(check, targets, "targets", vocab));
  const double mean_loss =
      cpu::HeadCrossEntropy(x.as<float>(), head.as<float>(), targets.as<int32_t>(), targets.numel(),
                            head.shape[1], vocab, loss_scale, OrNull(dx), OrNull(dhead));
  *loss.as<float>() = static_cast<float>(mean_loss);
  return absl::OkStatus();
}

absl::Status CpuOps::Cast(const Tensor& src, const Tensor& dst, Stream&) {
  if (src.dtype == dst.dtype) {
    std::memmove(dst.data, src.data, static_cast<size_t>(src.bytes()));
  } else if (src.dtype == DType::kF32 && dst.dtype == DType::kBF16) {
    cpu::CastFloat32ToBfloat16(src.as<float>(), src.numel(), dst.as<uint16_t>());
  } else if (src.dtype == DType::kBF16 && dst.dtype == DType::kF32) {
    cpu::CastBfloat16ToFloat32(src.as<uint16_t>(), src.numel(), dst.as<float>());
  } else {
    return OpArguments("Cast").Error(absl::StrCat("no conversion from ", src.Describe(), " to ",
                                                  dst.Describe(), " (only between f32 and bf16)"));
  }
  return absl::OkStatus();
}

// The ops below take f32 or bf16 (CheckedOps checked which); bf16 values are stored as bits.

absl::Status CpuOps::RoundToBf16(const Tensor& x, Stream&) {
  if (x.dtype == DType::kBF16) return absl::OkStatus();  // already bf16 values
  cpu::RoundToBfloat16(x.as<float>(), x.numel());
  return absl::OkStatus();
}

absl::Status CpuOps::Fill(const Tensor& x, float value, Stream&) {
  if (x.dtype == DType::kBF16) {
    const uint16_t bits = cpu::Float32ToBfloat16(value);
    uint16_t* values = x.as<uint16_t>();
    for (int64_t i = 0; i < x.numel(); ++i) values[i] = bits;
    return absl::OkStatus();
  }
  cpu::Fill(x.as<float>(), x.numel(), value);
  return absl::OkStatus();
}

absl::Status CpuOps::Scale(const Tensor& x, float factor, Stream&) {
  if (x.dtype == DType::kBF16) {
    uint16_t* values = x.as<uint16_t>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      values[i] = cpu::Float32ToBfloat16(cpu::Bfloat16ToFloat32(values[i]) * factor);
    }
    return absl::OkStatus();
  }
  cpu::Scale(x.as<float>(), x.numel(), factor);
  return absl::OkStatus();
}

absl::Status CpuOps::SumOfSquares(const Tensor& x, const Tensor& result, Stream&) {
  double sum = 0.0;
  if (x.dtype == DType::kBF16) {
    const uint16_t* values = x.as<uint16_t>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double value = cpu::Bfloat16ToFloat32(values[i]);
      sum += value * value;
    }
  } else {
    sum = cpu::SumOfSquares(x.as<float>(), x.numel());
  }
  *result.as<float>() = static_cast<float>(sum);
  return absl::OkStatus();
}

// CheckedOps checked the four f32 shards and the hyperparameters.
absl::Status CpuOps::AdamW(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                           const Tensor& exp_avg_sq, const AdamWParams& params, Stream&) {
  cpu::AdamWHyperparameters hyperparameters{params.lr,  params.beta1,        params.beta2,
                                            params.eps, params.weight_decay, params.step};
  cpu::AdamWStep(param.as<float>(), grad.as<float>(), exp_avg.as<float>(), exp_avg_sq.as<float>(),
                 param.numel(), hyperparameters);
  return absl::OkStatus();
}

// Two passes: the sum first, as the clipping path takes it.
absl::Status CpuOps::AdamWWithGradSquareSum(const Tensor& param, const Tensor& grad,
                                            const Tensor& exp_avg, const Tensor& exp_avg_sq,
                                            const AdamWParams& params,
                                            const Tensor& grad_square_sum, Stream& stream) {
  FSDPD_RETURN_IF_ERROR(SumOfSquares(grad, grad_square_sum, stream));
  return AdamW(param, grad, exp_avg, exp_avg_sq, params, stream);
}

// CheckedOps checked the halves, the three f32 shards and the hyperparameters.
absl::Status CpuOps::AdamWSplitMaster(const Tensor& high, const Tensor& low, const Tensor& grad,
                                      const Tensor& exp_avg, const Tensor& exp_avg_sq,
                                      const AdamWParams& params, const Tensor& grad_square_sum,
                                      Stream& stream) {
  if (grad_square_sum.data != nullptr) {
    FSDPD_RETURN_IF_ERROR(SumOfSquares(grad, grad_square_sum, stream));
  }
  cpu::AdamWHyperparameters hyperparameters{params.lr,  params.beta1,        params.beta2,
                                            params.eps, params.weight_decay, params.step};
  cpu::AdamWStepSplit(static_cast<uint16_t*>(high.data), static_cast<uint16_t*>(low.data),
                      grad.as<float>(), exp_avg.as<float>(), exp_avg_sq.as<float>(), high.numel(),
                      hyperparameters);
  return absl::OkStatus();
}

}  // namespace fsdpd
