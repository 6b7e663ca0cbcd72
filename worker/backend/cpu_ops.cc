#include "worker/backend/cpu_ops.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "kernels/cpu/adamw.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/silu.h"

namespace fsdpd {
namespace {

// Argument checks shared by every op. Each returns INVALID_ARGUMENT naming the op, the
// argument and its Describe()d tensor, so a caller sees exactly what did not fit.
class Checker {
 public:
  explicit Checker(const char* op) : op_(op) {}

  absl::Status Error(const std::string& message) const {
    return absl::InvalidArgumentError(absl::StrCat(op_, ": ", message));
  }

  absl::Status Present(const Tensor& t, const char* name) const {
    if (t.data == nullptr) return Error(absl::StrCat(name, " has no data (", t.Describe(), ")"));
    for (int64_t d : t.shape) {
      if (d < 0) return Error(absl::StrCat(name, " has a negative dimension: ", t.Describe()));
    }
    return absl::OkStatus();
  }

  absl::Status Typed(const Tensor& t, const char* name, DType dtype) const {
    if (auto status = Present(t, name); !status.ok()) return status;
    if (t.dtype != dtype) {
      return Error(absl::StrCat(name, " must be ", DTypeName(dtype), ", got ", t.Describe()));
    }
    return absl::OkStatus();
  }

  absl::Status Float(const Tensor& t, const char* name) const {
    return Typed(t, name, DType::kF32);
  }

  // A float tensor of exactly this shape.
  absl::Status Shaped(const Tensor& t, const char* name, const std::vector<int64_t>& shape) const {
    if (auto status = Float(t, name); !status.ok()) return status;
    if (t.shape != shape) {
      return Error(
          absl::StrCat(name, " must be f32[", absl::StrJoin(shape, ", "), "], got ", t.Describe()));
    }
    return absl::OkStatus();
  }

  // A float tensor of `rows` rows of `width` (any leading shape, last dimension `width`).
  absl::Status Rows(const Tensor& t, const char* name, int64_t rows, int64_t width,
                    const std::string& why) const {
    if (auto status = Float(t, name); !status.ok()) return status;
    if (t.shape.empty() || t.shape.back() != width || t.numel() != rows * width) {
      return Error(absl::StrCat(name, " must hold ", rows, " rows of ", width, " (", why, "), got ",
                                t.Describe()));
    }
    return absl::OkStatus();
  }

  // A float tensor with the same number of elements as `reference`.
  absl::Status SameCount(const Tensor& t, const char* name, const Tensor& reference,
                         const char* reference_name) const {
    if (auto status = Float(t, name); !status.ok()) return status;
    if (t.numel() != reference.numel()) {
      return Error(absl::StrCat(name, " ", t.Describe(), " must have as many elements as ",
                                reference_name, " ", reference.Describe()));
    }
    return absl::OkStatus();
  }

  // The last dimension of a float tensor with at least one dimension.
  absl::StatusOr<int64_t> Width(const Tensor& t, const char* name) const {
    if (auto status = Float(t, name); !status.ok()) return status;
    if (t.shape.empty()) return Error(absl::StrCat(name, " must have at least one dimension"));
    return t.shape.back();
  }

  absl::Status Matrix(const Tensor& t, const char* name) const {
    if (auto status = Float(t, name); !status.ok()) return status;
    if (t.shape.size() != 2) {
      return Error(absl::StrCat(name, " must be a matrix, got ", t.Describe()));
    }
    return absl::OkStatus();
  }

  absl::Status ValidIds(const Tensor& ids, const char* name, int64_t limit) const {
    const int64_t invalid = cpu::FindInvalidToken(ids.as<int32_t>(), ids.numel(), limit);
    if (invalid >= 0) {
      return Error(absl::StrCat(name, "[", invalid, "] = ", ids.as<int32_t>()[invalid],
                                " is outside [0, ", limit, ")"));
    }
    return absl::OkStatus();
  }

 private:
  const char* op_;
};

int64_t RowsOf(const Tensor& t) {
  return t.shape.empty() ? 0 : t.numel() / std::max<int64_t>(t.shape.back(), 1);
}

}  // namespace

absl::Status CpuOps::EmbeddingForward(const Tensor& weight, const Tensor& tokens, const Tensor& out,
                                      Stream&) {
  Checker check("EmbeddingForward");
  FSDPD_RETURN_IF_ERROR(check.Matrix(weight, "weight"));
  FSDPD_RETURN_IF_ERROR(check.Typed(tokens, "tokens", DType::kI32));
  const int64_t dim = weight.shape[1];
  FSDPD_RETURN_IF_ERROR(check.Rows(out, "out", tokens.numel(), dim, "one row per token"));
  FSDPD_RETURN_IF_ERROR(check.ValidIds(tokens, "tokens", weight.shape[0]));
  cpu::EmbeddingForward(weight.as<float>(), tokens.as<int32_t>(), tokens.numel(), dim,
                        out.as<float>());
  return absl::OkStatus();
}

absl::Status CpuOps::EmbeddingBackward(const Tensor& dout, const Tensor& tokens,
                                       const Tensor& dweight, Stream&) {
  Checker check("EmbeddingBackward");
  FSDPD_RETURN_IF_ERROR(check.Matrix(dweight, "dweight"));
  FSDPD_RETURN_IF_ERROR(check.Typed(tokens, "tokens", DType::kI32));
  const int64_t dim = dweight.shape[1];
  FSDPD_RETURN_IF_ERROR(check.Rows(dout, "dout", tokens.numel(), dim, "one row per token"));
  FSDPD_RETURN_IF_ERROR(check.ValidIds(tokens, "tokens", dweight.shape[0]));
  cpu::EmbeddingBackward(dout.as<float>(), tokens.as<int32_t>(), tokens.numel(), dim,
                         dweight.as<float>());
  return absl::OkStatus();
}

absl::Status CpuOps::RmsNormForward(const Tensor& x, const Tensor& weight, double eps,
                                    const Tensor& out, const Tensor& rstd, Stream&) {
  Checker check("RmsNormForward");
  absl::StatusOr<int64_t> dim = check.Width(x, "x");
  if (!dim.ok()) return dim.status();
  const int64_t rows = RowsOf(x);
  FSDPD_RETURN_IF_ERROR(check.Shaped(weight, "weight", {*dim}));
  FSDPD_RETURN_IF_ERROR(check.Rows(out, "out", rows, *dim, "the shape of x"));
  FSDPD_RETURN_IF_ERROR(check.Float(rstd, "rstd"));
  if (rstd.numel() != rows) {
    return check.Error(
        absl::StrCat("rstd must have one value per row of x (", rows, "), got ", rstd.Describe()));
  }
  if (!(eps >= 0.0)) return check.Error(absl::StrCat("eps must be >= 0, got ", eps));
  cpu::RmsNormForward(x.as<float>(), weight.as<float>(), rows, *dim, eps, out.as<float>(),
                      rstd.as<float>());
  return absl::OkStatus();
}

absl::Status CpuOps::RmsNormBackward(const Tensor& dout, const Tensor& x, const Tensor& weight,
                                     const Tensor& rstd, const Tensor& dx, const Tensor& dweight,
                                     Stream&) {
  Checker check("RmsNormBackward");
  absl::StatusOr<int64_t> dim = check.Width(x, "x");
  if (!dim.ok()) return dim.status();
  const int64_t rows = RowsOf(x);
  FSDPD_RETURN_IF_ERROR(check.Rows(dout, "dout", rows, *dim, "the shape of x"));
  FSDPD_RETURN_IF_ERROR(check.Shaped(weight, "weight", {*dim}));
  FSDPD_RETURN_IF_ERROR(check.Float(rstd, "rstd"));
  if (rstd.numel() != rows) {
    return check.Error(
        absl::StrCat("rstd must have one value per row of x (", rows, "), got ", rstd.Describe()));
  }
  FSDPD_RETURN_IF_ERROR(check.Rows(dx, "dx", rows, *dim, "the shape of x"));
  FSDPD_RETURN_IF_ERROR(check.Shaped(dweight, "dweight", {*dim}));
  cpu::RmsNormBackward(dout.as<float>(), x.as<float>(), weight.as<float>(), rstd.as<float>(), rows,
                       *dim, dx.as<float>(), dweight.as<float>());
  return absl::OkStatus();
}

absl::Status CpuOps::LinearForward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                   const Tensor& out, Stream&) {
  Checker check("LinearForward");
  FSDPD_RETURN_IF_ERROR(check.Matrix(weight, "weight"));
  const int64_t out_features = weight.shape[0];
  const int64_t in_features = weight.shape[1];
  absl::StatusOr<int64_t> width = check.Width(x, "x");
  if (!width.ok()) return width.status();
  const int64_t rows = RowsOf(x);
  FSDPD_RETURN_IF_ERROR(
      check.Rows(x, "x", rows, in_features, absl::StrCat("weight is ", weight.Describe())));
  if (bias.data != nullptr) FSDPD_RETURN_IF_ERROR(check.Shaped(bias, "bias", {out_features}));
  FSDPD_RETURN_IF_ERROR(
      check.Rows(out, "out", rows, out_features,
                 absl::StrCat("x is ", x.Describe(), ", weight is ", weight.Describe())));
  cpu::LinearForward(x.as<float>(), weight.as<float>(),
                     bias.data != nullptr ? bias.as<float>() : nullptr, rows, in_features,
                     out_features, out.as<float>());
  return absl::OkStatus();
}

absl::Status CpuOps::LinearBackward(const Tensor& dout, const Tensor& x, const Tensor& weight,
                                    const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                                    Stream&) {
  Checker check("LinearBackward");
  FSDPD_RETURN_IF_ERROR(check.Matrix(weight, "weight"));
  const int64_t out_features = weight.shape[0];
  const int64_t in_features = weight.shape[1];
  absl::StatusOr<int64_t> width = check.Width(x, "x");
  if (!width.ok()) return width.status();
  const int64_t rows = RowsOf(x);
  FSDPD_RETURN_IF_ERROR(
      check.Rows(x, "x", rows, in_features, absl::StrCat("weight is ", weight.Describe())));
  FSDPD_RETURN_IF_ERROR(
      check.Rows(dout, "dout", rows, out_features,
                 absl::StrCat("x is ", x.Describe(), ", weight is ", weight.Describe())));
  if (dx.data != nullptr) {
    FSDPD_RETURN_IF_ERROR(check.Rows(dx, "dx", rows, in_features, "the shape of x"));
  }
  if (dweight.data != nullptr) {
    FSDPD_RETURN_IF_ERROR(check.Shaped(dweight, "dweight", weight.shape));
  }
  if (dbias.data != nullptr) FSDPD_RETURN_IF_ERROR(check.Shaped(dbias, "dbias", {out_features}));
  cpu::LinearBackward(dout.as<float>(), x.as<float>(), weight.as<float>(), rows, in_features,
                      out_features, dx.data != nullptr ? dx.as<float>() : nullptr,
                      dweight.data != nullptr ? dweight.as<float>() : nullptr,
                      dbias.data != nullptr ? dbias.as<float>() : nullptr);
  return absl::OkStatus();
}

namespace {

absl::StatusOr<cpu::AttentionShape> AttentionShapeOf(const Checker& check, const Tensor& qkv,
                                                     int64_t heads, const Tensor& out,
                                                     const Tensor& lse) {
  FSDPD_RETURN_IF_ERROR(check.Float(qkv, "qkv"));
  if (qkv.shape.size() != 3 || qkv.shape[2] % 3 != 0) {
    return check.Error(absl::StrCat("qkv must be [batch, seq, 3·dim], got ", qkv.Describe()));
  }
  cpu::AttentionShape shape{qkv.shape[0], qkv.shape[1], heads, qkv.shape[2] / 3};
  if (heads <= 0 || shape.dim % heads != 0) {
    return check.Error(absl::StrCat("heads (", heads, ") must be positive and divide dim ",
                                    shape.dim, " of qkv ", qkv.Describe()));
  }
  FSDPD_RETURN_IF_ERROR(check.Shaped(out, "out", {shape.batch, shape.seq, shape.dim}));
  FSDPD_RETURN_IF_ERROR(check.Shaped(lse, "lse", {shape.batch, heads, shape.seq}));
  return shape;
}

}  // namespace

absl::Status CpuOps::AttentionForward(const Tensor& qkv, int64_t heads, bool causal,
                                      const Tensor& out, const Tensor& lse, Stream&) {
  Checker check("AttentionForward");
  absl::StatusOr<cpu::AttentionShape> shape = AttentionShapeOf(check, qkv, heads, out, lse);
  if (!shape.ok()) return shape.status();
  cpu::AttentionForward(qkv.as<float>(), *shape, causal, out.as<float>(), lse.as<float>());
  return absl::OkStatus();
}

absl::Status CpuOps::AttentionBackward(const Tensor& dout, const Tensor& qkv, const Tensor& out,
                                       const Tensor& lse, int64_t heads, bool causal,
                                       const Tensor& dqkv, Stream&) {
  Checker check("AttentionBackward");
  absl::StatusOr<cpu::AttentionShape> shape = AttentionShapeOf(check, qkv, heads, out, lse);
  if (!shape.ok()) return shape.status();
  FSDPD_RETURN_IF_ERROR(check.Shaped(dout, "dout", out.shape));
  FSDPD_RETURN_IF_ERROR(check.Shaped(dqkv, "dqkv", qkv.shape));
  cpu::AttentionBackward(dout.as<float>(), qkv.as<float>(), out.as<float>(), lse.as<float>(),
                         *shape, causal, dqkv.as<float>());
  return absl::OkStatus();
}

absl::Status CpuOps::SiluForward(const Tensor& x, const Tensor& out, Stream&) {
  Checker check("SiluForward");
  FSDPD_RETURN_IF_ERROR(check.Float(x, "x"));
  FSDPD_RETURN_IF_ERROR(check.SameCount(out, "out", x, "x"));
  cpu::SiluForward(x.as<float>(), x.numel(), out.as<float>());
  return absl::OkStatus();
}

absl::Status CpuOps::SiluBackward(const Tensor& dout, const Tensor& x, const Tensor& dx, Stream&) {
  Checker check("SiluBackward");
  FSDPD_RETURN_IF_ERROR(check.Float(x, "x"));
  FSDPD_RETURN_IF_ERROR(check.SameCount(dout, "dout", x, "x"));
  FSDPD_RETURN_IF_ERROR(check.SameCount(dx, "dx", x, "x"));
  cpu::SiluBackward(dout.as<float>(), x.as<float>(), x.numel(), dx.as<float>());
  return absl::OkStatus();
}

absl::Status CpuOps::Add(const Tensor& a, const Tensor& b, const Tensor& out, Stream&) {
  Checker check("Add");
  FSDPD_RETURN_IF_ERROR(check.Float(a, "a"));
  FSDPD_RETURN_IF_ERROR(check.SameCount(b, "b", a, "a"));
  FSDPD_RETURN_IF_ERROR(check.SameCount(out, "out", a, "a"));
  cpu::Add(a.as<float>(), b.as<float>(), a.numel(), out.as<float>());
  return absl::OkStatus();
}

absl::Status CpuOps::HeadCrossEntropy(const Tensor& x, const Tensor& head, const Tensor& targets,
                                      double loss_scale, const Tensor& loss, const Tensor& dx,
                                      const Tensor& dhead, Stream&) {
  Checker check("HeadCrossEntropy");
  FSDPD_RETURN_IF_ERROR(check.Matrix(head, "head"));
  const int64_t vocab = head.shape[0];
  const int64_t dim = head.shape[1];
  FSDPD_RETURN_IF_ERROR(check.Typed(targets, "targets", DType::kI32));
  const int64_t tokens = targets.numel();
  FSDPD_RETURN_IF_ERROR(check.Rows(
      x, "x", tokens, dim,
      absl::StrCat("one row per target of ", targets.Describe(), ", head is ", head.Describe())));
  FSDPD_RETURN_IF_ERROR(check.Float(loss, "loss"));
  if (loss.numel() != 1) {
    return check.Error(absl::StrCat("loss must be a single value, got ", loss.Describe()));
  }
  if (dx.data != nullptr) FSDPD_RETURN_IF_ERROR(check.Rows(dx, "dx", tokens, dim, "as x"));
  if (dhead.data != nullptr) FSDPD_RETURN_IF_ERROR(check.Shaped(dhead, "dhead", head.shape));
  if (tokens == 0) return check.Error("the mean over zero tokens is undefined");
  FSDPD_RETURN_IF_ERROR(check.ValidIds(targets, "targets", vocab));
  const double mean_loss =
      cpu::HeadCrossEntropy(x.as<float>(), head.as<float>(), targets.as<int32_t>(), tokens, dim,
                            vocab, loss_scale, dx.data != nullptr ? dx.as<float>() : nullptr,
                            dhead.data != nullptr ? dhead.as<float>() : nullptr);
  *loss.as<float>() = static_cast<float>(mean_loss);
  return absl::OkStatus();
}

absl::Status CpuOps::Cast(const Tensor& src, const Tensor& dst, Stream&) {
  Checker check("Cast");
  FSDPD_RETURN_IF_ERROR(check.Present(src, "src"));
  FSDPD_RETURN_IF_ERROR(check.Present(dst, "dst"));
  if (src.numel() != dst.numel()) {
    return check.Error(absl::StrCat("dst ", dst.Describe(), " must have as many elements as src ",
                                    src.Describe()));
  }
  if (src.dtype == dst.dtype) {
    std::memmove(dst.data, src.data, static_cast<size_t>(src.bytes()));
  } else if (src.dtype == DType::kF32 && dst.dtype == DType::kBF16) {
    cpu::CastFloat32ToBfloat16(src.as<float>(), src.numel(), dst.as<uint16_t>());
  } else if (src.dtype == DType::kBF16 && dst.dtype == DType::kF32) {
    cpu::CastBfloat16ToFloat32(src.as<uint16_t>(), src.numel(), dst.as<float>());
  } else {
    return check.Error(absl::StrCat("no conversion from ", src.Describe(), " to ", dst.Describe(),
                                    " (only between f32 and bf16)"));
  }
  return absl::OkStatus();
}

absl::Status CpuOps::RoundToBf16(const Tensor& x, Stream&) {
  Checker check("RoundToBf16");
  FSDPD_RETURN_IF_ERROR(check.Present(x, "x"));
  if (x.dtype == DType::kBF16) return absl::OkStatus();  // already bf16 values
  FSDPD_RETURN_IF_ERROR(check.Float(x, "x"));
  cpu::RoundToBfloat16(x.as<float>(), x.numel());
  return absl::OkStatus();
}

absl::Status CpuOps::Fill(const Tensor& x, float value, Stream&) {
  Checker check("Fill");
  FSDPD_RETURN_IF_ERROR(check.Present(x, "x"));
  if (x.dtype == DType::kBF16) {
    const uint16_t bits = cpu::Float32ToBfloat16(value);
    uint16_t* values = x.as<uint16_t>();
    for (int64_t i = 0; i < x.numel(); ++i) values[i] = bits;
    return absl::OkStatus();
  }
  FSDPD_RETURN_IF_ERROR(check.Float(x, "x"));
  cpu::Fill(x.as<float>(), x.numel(), value);
  return absl::OkStatus();
}

absl::Status CpuOps::Scale(const Tensor& x, float factor, Stream&) {
  Checker check("Scale");
  FSDPD_RETURN_IF_ERROR(check.Present(x, "x"));
  if (x.dtype == DType::kBF16) {
    uint16_t* values = x.as<uint16_t>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      values[i] = cpu::Float32ToBfloat16(cpu::Bfloat16ToFloat32(values[i]) * factor);
    }
    return absl::OkStatus();
  }
  FSDPD_RETURN_IF_ERROR(check.Float(x, "x"));
  cpu::Scale(x.as<float>(), x.numel(), factor);
  return absl::OkStatus();
}

absl::Status CpuOps::SumOfSquares(const Tensor& x, const Tensor& result, Stream&) {
  Checker check("SumOfSquares");
  FSDPD_RETURN_IF_ERROR(check.Present(x, "x"));
  FSDPD_RETURN_IF_ERROR(check.Float(result, "result"));
  if (result.numel() != 1) {
    return check.Error(absl::StrCat("result must be a single value, got ", result.Describe()));
  }
  double sum = 0.0;
  if (x.dtype == DType::kBF16) {
    const uint16_t* values = x.as<uint16_t>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double value = cpu::Bfloat16ToFloat32(values[i]);
      sum += value * value;
    }
  } else {
    FSDPD_RETURN_IF_ERROR(check.Float(x, "x"));
    sum = cpu::SumOfSquares(x.as<float>(), x.numel());
  }
  *result.as<float>() = static_cast<float>(sum);
  return absl::OkStatus();
}

absl::Status CpuOps::AdamW(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                           const Tensor& exp_avg_sq, const AdamWParams& params, Stream&) {
  Checker check("AdamW");
  FSDPD_RETURN_IF_ERROR(check.Float(param, "param"));
  FSDPD_RETURN_IF_ERROR(check.SameCount(grad, "grad", param, "param"));
  FSDPD_RETURN_IF_ERROR(check.SameCount(exp_avg, "exp_avg", param, "param"));
  FSDPD_RETURN_IF_ERROR(check.SameCount(exp_avg_sq, "exp_avg_sq", param, "param"));
  if (params.step < 1) return check.Error(absl::StrCat("step must be >= 1, got ", params.step));
  if (!(params.lr >= 0.0)) return check.Error(absl::StrCat("lr must be >= 0, got ", params.lr));
  if (!(params.beta1 >= 0.0 && params.beta1 < 1.0) ||
      !(params.beta2 >= 0.0 && params.beta2 < 1.0)) {
    return check.Error(
        absl::StrCat("betas must lie in [0, 1), got ", params.beta1, " and ", params.beta2));
  }
  if (!(params.eps >= 0.0)) return check.Error(absl::StrCat("eps must be >= 0, got ", params.eps));
  if (!(params.weight_decay >= 0.0)) {
    return check.Error(absl::StrCat("weight_decay must be >= 0, got ", params.weight_decay));
  }
  cpu::AdamWHyperparameters hyperparameters{params.lr,  params.beta1,        params.beta2,
                                            params.eps, params.weight_decay, params.step};
  cpu::AdamWStep(param.as<float>(), grad.as<float>(), exp_avg.as<float>(), exp_avg_sq.as<float>(),
                 param.numel(), hyperparameters);
  return absl::OkStatus();
}

}  // namespace fsdpd
