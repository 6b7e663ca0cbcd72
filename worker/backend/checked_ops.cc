#include "worker/backend/checked_ops.h"

#include <initializer_list>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "worker/backend/op_arguments.h"

namespace fsdpd {
namespace {

using Named = std::pair<const Tensor*, const char*>;

// No output overlaps an input or another output (absent optional outputs are skipped).
absl::Status NoOverlap(const OpArguments& check, std::initializer_list<Named> outputs,
                       std::initializer_list<Named> inputs) {
  for (auto out = outputs.begin(); out != outputs.end(); ++out) {
    for (const Named& in : inputs) {
      FSDPD_RETURN_IF_ERROR(check.Disjoint(*out->first, out->second, *in.first, in.second));
    }
    for (auto other = out + 1; other != outputs.end(); ++other) {
      FSDPD_RETURN_IF_ERROR(check.Disjoint(*out->first, out->second, *other->first, other->second));
    }
  }
  return absl::OkStatus();
}

// An Fp8OperandAmax tensor (worker/backend/ops.h), where present: one fp32 value.
absl::Status CheckAmax(const OpArguments& check, const Tensor& amax, const char* name) {
  if (amax.data == nullptr) return absl::OkStatus();
  FSDPD_RETURN_IF_ERROR(check.Typed(amax, name, DType::kF32));
  return check.Scalar(amax, name);
}

absl::Status CheckRstd(const OpArguments& check, const Tensor& rstd, int64_t rows) {
  FSDPD_RETURN_IF_ERROR(check.Typed(rstd, "rstd", DType::kF32));
  if (rstd.numel() != rows) {
    return check.Error(
        absl::StrCat("rstd must have one value per row of x (", rows, "), got ", rstd.Describe()));
  }
  return absl::OkStatus();
}

// x[.., K] against weight[N, K]; returns the rows of x.
absl::StatusOr<int64_t> CheckLinearInput(const OpArguments& check, const Tensor& x,
                                         const Tensor& weight) {
  FSDPD_RETURN_IF_ERROR(check.Matrix(weight, "weight"));
  FSDPD_RETURN_IF_ERROR(check.Width(x, "x").status());
  const int64_t rows = RowsOf(x);
  FSDPD_RETURN_IF_ERROR(
      check.Rows(x, "x", rows, weight.shape[1], absl::StrCat("weight is ", weight.Describe())));
  return rows;
}

// The FP8 products' rule (ops.h): rows, in and out features all multiples of 16.
absl::Status CheckFp8Dimensions(const OpArguments& check, int64_t rows, const Tensor& weight) {
  if (rows % 16 != 0 || weight.shape[0] % 16 != 0 || weight.shape[1] % 16 != 0) {
    return check.Error(
        absl::StrCat("FP8 products need rows, in and out features multiples of 16, got ", rows,
                     " rows and weight ", weight.Describe()));
  }
  return absl::OkStatus();
}

// The head counts of grouped-query attention: both positive, kv_heads dividing heads.
absl::Status CheckHeads(const OpArguments& check, int64_t heads, int64_t kv_heads) {
  if (heads <= 0 || kv_heads <= 0 || heads % kv_heads != 0) {
    return check.Error(absl::StrCat("heads (", heads, ") and kv_heads (", kv_heads,
                                    ") must be positive, with kv_heads dividing heads"));
  }
  return absl::OkStatus();
}

// qkv[B, S, (heads + 2·kv_heads)·hd] (ops.h); returns hd.
absl::StatusOr<int64_t> CheckPackedQkv(const OpArguments& check, const Tensor& qkv, int64_t heads,
                                       int64_t kv_heads) {
  FSDPD_RETURN_IF_ERROR(check.Present(qkv, "qkv"));
  FSDPD_RETURN_IF_ERROR(CheckHeads(check, heads, kv_heads));
  const int64_t columns = heads + 2 * kv_heads;
  if (qkv.shape.size() != 3 || qkv.shape[2] % columns != 0) {
    return check.Error(absl::StrCat("qkv must be [batch, seq, (heads + 2·kv_heads)·head_dim] with ",
                                    heads, " heads and ", kv_heads, " kv_heads, got ",
                                    qkv.Describe()));
  }
  return qkv.shape[2] / columns;
}

// qkv as CheckPackedQkv, out[B, S, heads·hd] and lse[B, heads, S] (f32).
absl::Status CheckAttention(const OpArguments& check, const Tensor& qkv, int64_t heads,
                            int64_t kv_heads, const Tensor& out, const Tensor& lse) {
  FSDPD_ASSIGN_OR_RETURN(const int64_t head_dim, CheckPackedQkv(check, qkv, heads, kv_heads));
  FSDPD_RETURN_IF_ERROR(check.Shaped(out, "out", {qkv.shape[0], qkv.shape[1], heads * head_dim}));
  FSDPD_RETURN_IF_ERROR(check.Typed(lse, "lse", DType::kF32));
  return check.Shaped(lse, "lse", {qkv.shape[0], heads, qkv.shape[1]});
}

// gate_up[T, 2F]; returns F.
absl::StatusOr<int64_t> CheckGateUp(const OpArguments& check, const Tensor& gate_up) {
  FSDPD_ASSIGN_OR_RETURN(const int64_t width, check.Width(gate_up, "gate_up"));
  if (width % 2 != 0) {
    return check.Error(
        absl::StrCat("gate_up must be [tokens, 2·ffn] (gate then up), got ", gate_up.Describe()));
  }
  return width / 2;
}

absl::Status CheckAdamWParams(const OpArguments& check, const AdamWParams& params) {
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
  return absl::OkStatus();
}

// The optimizer's f32 gradient and moments, each as long as the master (`master`, named
// `master_name`), and the hyperparameters.
absl::Status CheckGradientAndMoments(const OpArguments& check, const Tensor& master,
                                     const char* master_name, const Tensor& grad,
                                     const Tensor& exp_avg, const Tensor& exp_avg_sq,
                                     const AdamWParams& params) {
  FSDPD_RETURN_IF_ERROR(check.Typed(grad, "grad", DType::kF32));
  FSDPD_RETURN_IF_ERROR(check.Typed(exp_avg, "exp_avg", DType::kF32));
  FSDPD_RETURN_IF_ERROR(check.Typed(exp_avg_sq, "exp_avg_sq", DType::kF32));
  FSDPD_RETURN_IF_ERROR(check.SameCount(grad, "grad", master, master_name));
  FSDPD_RETURN_IF_ERROR(check.SameCount(exp_avg, "exp_avg", master, master_name));
  FSDPD_RETURN_IF_ERROR(check.SameCount(exp_avg_sq, "exp_avg_sq", master, master_name));
  return CheckAdamWParams(check, params);
}

// AdamW's four f32 shards of one length, the hyperparameters, no update written over grad.
absl::Status CheckAdamWArguments(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                                 const Tensor& exp_avg_sq, const AdamWParams& params) {
  OpArguments check("AdamW");
  FSDPD_RETURN_IF_ERROR(check.Typed(param, "param", DType::kF32));
  FSDPD_RETURN_IF_ERROR(
      CheckGradientAndMoments(check, param, "param", grad, exp_avg, exp_avg_sq, params));
  return NoOverlap(check, {{&param, "param"}, {&exp_avg, "exp_avg"}, {&exp_avg_sq, "exp_avg_sq"}},
                   {{&grad, "grad"}});
}

}  // namespace

absl::Status CheckedOps::EmbeddingForward(const Tensor& weight, const Tensor& tokens,
                                          const Tensor& out, Stream& stream) {
  OpArguments check("EmbeddingForward");
  FSDPD_RETURN_IF_ERROR(check.Matrix(weight, "weight"));
  FSDPD_RETURN_IF_ERROR(check.Typed(tokens, "tokens", DType::kI32));
  FSDPD_RETURN_IF_ERROR(
      check.Rows(out, "out", tokens.numel(), weight.shape[1], "one row per token"));
  FSDPD_RETURN_IF_ERROR(
      NoOverlap(check, {{&out, "out"}}, {{&weight, "weight"}, {&tokens, "tokens"}}));
  return inner_->EmbeddingForward(weight, tokens, out, stream);
}

absl::Status CheckedOps::EmbeddingBackward(const Tensor& dout, const Tensor& tokens,
                                           const Tensor& dweight, Stream& stream) {
  OpArguments check("EmbeddingBackward");
  FSDPD_RETURN_IF_ERROR(check.Matrix(dweight, "dweight"));
  FSDPD_RETURN_IF_ERROR(check.Typed(tokens, "tokens", DType::kI32));
  FSDPD_RETURN_IF_ERROR(
      check.Rows(dout, "dout", tokens.numel(), dweight.shape[1], "one row per token"));
  FSDPD_RETURN_IF_ERROR(
      NoOverlap(check, {{&dweight, "dweight"}}, {{&dout, "dout"}, {&tokens, "tokens"}}));
  return inner_->EmbeddingBackward(dout, tokens, dweight, stream);
}

absl::Status CheckedOps::RmsNormForward(const Tensor& x, const Tensor& weight, double eps,
                                        const Tensor& out, const Tensor& rstd,
                                        const Tensor& out_amax, Stream& stream) {
  OpArguments check("RmsNormForward");
  FSDPD_ASSIGN_OR_RETURN(const int64_t dim, check.Width(x, "x"));
  const int64_t rows = RowsOf(x);
  FSDPD_RETURN_IF_ERROR(check.Shaped(weight, "weight", {dim}));
  FSDPD_RETURN_IF_ERROR(check.Rows(out, "out", rows, dim, "the shape of x"));
  FSDPD_RETURN_IF_ERROR(CheckRstd(check, rstd, rows));
  if (!(eps >= 0.0)) return check.Error(absl::StrCat("eps must be >= 0, got ", eps));
  FSDPD_RETURN_IF_ERROR(
      NoOverlap(check, {{&out, "out"}, {&rstd, "rstd"}}, {{&x, "x"}, {&weight, "weight"}}));
  FSDPD_RETURN_IF_ERROR(CheckAmax(check, out_amax, "out_amax"));
  FSDPD_RETURN_IF_ERROR(
      NoOverlap(check, {{&out_amax, "out_amax"}},
                {{&x, "x"}, {&weight, "weight"}, {&out, "out"}, {&rstd, "rstd"}}));
  return inner_->RmsNormForward(x, weight, eps, out, rstd, out_amax, stream);
}

absl::Status CheckedOps::RmsNormBackward(const Tensor& dout, const Tensor& x, const Tensor& weight,
                                         const Tensor& rstd, const Tensor& dx, Write dx_write,
                                         const Tensor& dweight, Write dweight_write,
                                         const Tensor& dx_amax, Stream& stream) {
  OpArguments check("RmsNormBackward");
  FSDPD_ASSIGN_OR_RETURN(const int64_t dim, check.Width(x, "x"));
  const int64_t rows = RowsOf(x);
  FSDPD_RETURN_IF_ERROR(check.Rows(dout, "dout", rows, dim, "the shape of x"));
  FSDPD_RETURN_IF_ERROR(check.Shaped(weight, "weight", {dim}));
  FSDPD_RETURN_IF_ERROR(CheckRstd(check, rstd, rows));
  FSDPD_RETURN_IF_ERROR(check.Rows(dx, "dx", rows, dim, "the shape of x"));
  FSDPD_RETURN_IF_ERROR(check.Shaped(dweight, "dweight", {dim}));
  FSDPD_RETURN_IF_ERROR(
      NoOverlap(check, {{&dx, "dx"}, {&dweight, "dweight"}},
                {{&dout, "dout"}, {&x, "x"}, {&weight, "weight"}, {&rstd, "rstd"}}));
  FSDPD_RETURN_IF_ERROR(CheckAmax(check, dx_amax, "dx_amax"));
  FSDPD_RETURN_IF_ERROR(NoOverlap(check, {{&dx_amax, "dx_amax"}},
                                  {{&dout, "dout"},
                                   {&x, "x"},
                                   {&weight, "weight"},
                                   {&rstd, "rstd"},
                                   {&dx, "dx"},
                                   {&dweight, "dweight"}}));
  return inner_->RmsNormBackward(dout, x, weight, rstd, dx, dx_write, dweight, dweight_write,
                                 dx_amax, stream);
}

namespace {

// LinearForward's and Fp8LinearForward's arguments; `fp8` adds the FP8 products' rule.
absl::Status CheckLinearForward(const OpArguments& check, const Tensor& x, const Tensor& weight,
                                const Tensor& bias, const Tensor& out, bool fp8) {
  FSDPD_ASSIGN_OR_RETURN(const int64_t rows, CheckLinearInput(check, x, weight));
  const int64_t out_features = weight.shape[0];
  if (bias.data != nullptr) FSDPD_RETURN_IF_ERROR(check.Shaped(bias, "bias", {out_features}));
  FSDPD_RETURN_IF_ERROR(
      check.Rows(out, "out", rows, out_features,
                 absl::StrCat("x is ", x.Describe(), ", weight is ", weight.Describe())));
  if (fp8) FSDPD_RETURN_IF_ERROR(CheckFp8Dimensions(check, rows, weight));
  return NoOverlap(check, {{&out, "out"}}, {{&x, "x"}, {&weight, "weight"}, {&bias, "bias"}});
}

absl::Status CheckLinearBackward(const OpArguments& check, const Tensor& dout, const Tensor& x,
                                 const Tensor& weight, const Tensor& dx, const Tensor& dweight,
                                 const Tensor& dbias, bool fp8) {
  FSDPD_ASSIGN_OR_RETURN(const int64_t rows, CheckLinearInput(check, x, weight));
  const int64_t out_features = weight.shape[0];
  FSDPD_RETURN_IF_ERROR(
      check.Rows(dout, "dout", rows, out_features,
                 absl::StrCat("x is ", x.Describe(), ", weight is ", weight.Describe())));
  if (dx.data != nullptr) {
    FSDPD_RETURN_IF_ERROR(check.Rows(dx, "dx", rows, weight.shape[1], "the shape of x"));
  }
  if (dweight.data != nullptr) {
    FSDPD_RETURN_IF_ERROR(check.Shaped(dweight, "dweight", weight.shape));
  }
  if (dbias.data != nullptr) FSDPD_RETURN_IF_ERROR(check.Shaped(dbias, "dbias", {out_features}));
  if (fp8) FSDPD_RETURN_IF_ERROR(CheckFp8Dimensions(check, rows, weight));
  return NoOverlap(check, {{&dx, "dx"}, {&dweight, "dweight"}, {&dbias, "dbias"}},
                   {{&dout, "dout"}, {&x, "x"}, {&weight, "weight"}});
}

}  // namespace

absl::Status CheckedOps::LinearForward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                       const Tensor& out, Stream& stream) {
  FSDPD_RETURN_IF_ERROR(CheckLinearForward(OpArguments("LinearForward"), x, weight, bias, out,
                                           /*fp8=*/false));
  return inner_->LinearForward(x, weight, bias, out, stream);
}

absl::Status CheckedOps::LinearBackward(const Tensor& dout, const Tensor& x, const Tensor& weight,
                                        const Tensor& dx, const Tensor& dweight,
                                        const Tensor& dbias, Write grad_write, Stream& stream) {
  FSDPD_RETURN_IF_ERROR(CheckLinearBackward(OpArguments("LinearBackward"), dout, x, weight, dx,
                                            dweight, dbias, /*fp8=*/false));
  return inner_->LinearBackward(dout, x, weight, dx, dweight, dbias, grad_write, stream);
}

absl::Status CheckedOps::Fp8LinearForward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                          const Tensor& out, const Fp8OperandAmax& amax,
                                          Stream& stream) {
  const OpArguments check("Fp8LinearForward");
  FSDPD_RETURN_IF_ERROR(CheckLinearForward(check, x, weight, bias, out, /*fp8=*/true));
  if (amax.dout.data != nullptr) return check.Error("a forward has no dout amax");
  FSDPD_RETURN_IF_ERROR(CheckAmax(check, amax.x, "x amax"));
  FSDPD_RETURN_IF_ERROR(NoOverlap(check, {{&out, "out"}}, {{&amax.x, "x amax"}}));
  return inner_->Fp8LinearForward(x, weight, bias, out, amax, stream);
}

absl::Status CheckedOps::Fp8LinearBackward(const Tensor& dout, const Tensor& x,
                                           const Tensor& weight, const Tensor& dx,
                                           const Tensor& dweight, const Tensor& dbias,
                                           Write grad_write, const Fp8OperandAmax& amax,
                                           Stream& stream) {
  const OpArguments check("Fp8LinearBackward");
  FSDPD_RETURN_IF_ERROR(
      CheckLinearBackward(check, dout, x, weight, dx, dweight, dbias, /*fp8=*/true));
  FSDPD_RETURN_IF_ERROR(CheckAmax(check, amax.x, "x amax"));
  FSDPD_RETURN_IF_ERROR(CheckAmax(check, amax.dout, "dout amax"));
  FSDPD_RETURN_IF_ERROR(NoOverlap(check, {{&dx, "dx"}, {&dweight, "dweight"}, {&dbias, "dbias"}},
                                  {{&amax.x, "x amax"}, {&amax.dout, "dout amax"}}));
  return inner_->Fp8LinearBackward(dout, x, weight, dx, dweight, dbias, grad_write, amax, stream);
}

absl::Status CheckedOps::AttentionForward(const Tensor& qkv, int64_t heads, int64_t kv_heads,
                                          bool causal, const Tensor& out, const Tensor& lse,
                                          Stream& stream) {
  OpArguments check("AttentionForward");
  FSDPD_RETURN_IF_ERROR(CheckAttention(check, qkv, heads, kv_heads, out, lse));
  FSDPD_RETURN_IF_ERROR(NoOverlap(check, {{&out, "out"}, {&lse, "lse"}}, {{&qkv, "qkv"}}));
  return inner_->AttentionForward(qkv, heads, kv_heads, causal, out, lse, stream);
}

absl::Status CheckedOps::AttentionBackward(const Tensor& dout, const Tensor& qkv, const Tensor& out,
                                           const Tensor& lse, int64_t heads, int64_t kv_heads,
                                           bool causal, const Tensor& dqkv, Stream& stream) {
  OpArguments check("AttentionBackward");
  FSDPD_RETURN_IF_ERROR(CheckAttention(check, qkv, heads, kv_heads, out, lse));
  FSDPD_RETURN_IF_ERROR(check.Shaped(dout, "dout", out.shape));
  FSDPD_RETURN_IF_ERROR(check.Shaped(dqkv, "dqkv", qkv.shape));
  FSDPD_RETURN_IF_ERROR(NoOverlap(check, {{&dqkv, "dqkv"}},
                                  {{&dout, "dout"}, {&qkv, "qkv"}, {&out, "out"}, {&lse, "lse"}}));
  return inner_->AttentionBackward(dout, qkv, out, lse, heads, kv_heads, causal, dqkv, stream);
}

absl::Status CheckedOps::Rotary(const Tensor& qkv, int64_t heads, int64_t kv_heads, double theta,
                                bool inverse, Stream& stream) {
  OpArguments check("Rotary");
  FSDPD_ASSIGN_OR_RETURN(const int64_t head_dim, CheckPackedQkv(check, qkv, heads, kv_heads));
  if (head_dim % 2 != 0) {
    return check.Error(
        absl::StrCat("head_dim (", head_dim, ") must be even for rotary, qkv is ", qkv.Describe()));
  }
  if (!(theta > 0.0)) return check.Error(absl::StrCat("theta must be > 0, got ", theta));
  return inner_->Rotary(qkv, heads, kv_heads, theta, inverse, stream);
}

absl::Status CheckedOps::SwigluForward(const Tensor& gate_up, const Tensor& out, Stream& stream) {
  OpArguments check("SwigluForward");
  FSDPD_ASSIGN_OR_RETURN(const int64_t ffn, CheckGateUp(check, gate_up));
  FSDPD_RETURN_IF_ERROR(check.Rows(out, "out", RowsOf(gate_up), ffn, "half of gate_up's width"));
  FSDPD_RETURN_IF_ERROR(NoOverlap(check, {{&out, "out"}}, {{&gate_up, "gate_up"}}));
  return inner_->SwigluForward(gate_up, out, stream);
}

absl::Status CheckedOps::SwigluBackward(const Tensor& dout, const Tensor& gate_up,
                                        const Tensor& dgate_up, const Tensor& out, Stream& stream) {
  OpArguments check("SwigluBackward");
  FSDPD_ASSIGN_OR_RETURN(const int64_t ffn, CheckGateUp(check, gate_up));
  const int64_t rows = RowsOf(gate_up);
  FSDPD_RETURN_IF_ERROR(check.Rows(dout, "dout", rows, ffn, "half of gate_up's width"));
  FSDPD_RETURN_IF_ERROR(check.Rows(dgate_up, "dgate_up", rows, 2 * ffn, "the shape of gate_up"));
  FSDPD_RETURN_IF_ERROR(check.SameOrDisjoint(dgate_up, "dgate_up", gate_up, "gate_up"));
  FSDPD_RETURN_IF_ERROR(check.Disjoint(dgate_up, "dgate_up", dout, "dout"));
  if (out.data != nullptr) {
    FSDPD_RETURN_IF_ERROR(check.Rows(out, "out", rows, ffn, "half of gate_up's width"));
    FSDPD_RETURN_IF_ERROR(NoOverlap(
        check, {{&out, "out"}}, {{&dout, "dout"}, {&gate_up, "gate_up"}, {&dgate_up, "dgate_up"}}));
  }
  return inner_->SwigluBackward(dout, gate_up, dgate_up, out, stream);
}

absl::Status CheckedOps::SiluForward(const Tensor& x, const Tensor& out, const Tensor& out_amax,
                                     Stream& stream) {
  OpArguments check("SiluForward");
  FSDPD_RETURN_IF_ERROR(check.Present(x, "x"));
  FSDPD_RETURN_IF_ERROR(check.SameCount(out, "out", x, "x"));
  FSDPD_RETURN_IF_ERROR(check.SameOrDisjoint(out, "out", x, "x"));
  FSDPD_RETURN_IF_ERROR(CheckAmax(check, out_amax, "out_amax"));
  FSDPD_RETURN_IF_ERROR(NoOverlap(check, {{&out_amax, "out_amax"}}, {{&x, "x"}, {&out, "out"}}));
  return inner_->SiluForward(x, out, out_amax, stream);
}

absl::Status CheckedOps::SiluBackward(const Tensor& dout, const Tensor& x, const Tensor& dx,
                                      const Tensor& out, const Tensor& dx_amax,
                                      const Tensor& out_amax, Stream& stream) {
  OpArguments check("SiluBackward");
  FSDPD_RETURN_IF_ERROR(check.Present(x, "x"));
  FSDPD_RETURN_IF_ERROR(check.SameCount(dout, "dout", x, "x"));
  FSDPD_RETURN_IF_ERROR(check.SameCount(dx, "dx", x, "x"));
  FSDPD_RETURN_IF_ERROR(check.SameOrDisjoint(dx, "dx", dout, "dout"));
  FSDPD_RETURN_IF_ERROR(check.SameOrDisjoint(dx, "dx", x, "x"));
  if (out.data != nullptr) {
    FSDPD_RETURN_IF_ERROR(check.SameCount(out, "out", x, "x"));
    FSDPD_RETURN_IF_ERROR(
        NoOverlap(check, {{&out, "out"}}, {{&dout, "dout"}, {&x, "x"}, {&dx, "dx"}}));
  } else if (out_amax.data != nullptr) {
    return check.Error("out_amax needs out");
  }
  FSDPD_RETURN_IF_ERROR(CheckAmax(check, dx_amax, "dx_amax"));
  FSDPD_RETURN_IF_ERROR(CheckAmax(check, out_amax, "out_amax"));
  FSDPD_RETURN_IF_ERROR(NoOverlap(check, {{&dx_amax, "dx_amax"}, {&out_amax, "out_amax"}},
                                  {{&dout, "dout"}, {&x, "x"}, {&dx, "dx"}, {&out, "out"}}));
  return inner_->SiluBackward(dout, x, dx, out, dx_amax, out_amax, stream);
}

absl::Status CheckedOps::Add(const Tensor& a, const Tensor& b, const Tensor& out, Stream& stream) {
  OpArguments check("Add");
  FSDPD_RETURN_IF_ERROR(check.Present(a, "a"));
  FSDPD_RETURN_IF_ERROR(check.SameCount(b, "b", a, "a"));
  FSDPD_RETURN_IF_ERROR(check.SameCount(out, "out", a, "a"));
  FSDPD_RETURN_IF_ERROR(check.SameOrDisjoint(out, "out", a, "a"));
  FSDPD_RETURN_IF_ERROR(check.SameOrDisjoint(out, "out", b, "b"));
  return inner_->Add(a, b, out, stream);
}

absl::Status CheckedOps::HeadCrossEntropy(const Tensor& x, const Tensor& head,
                                          const Tensor& targets, double loss_scale,
                                          const Tensor& loss, const Tensor& dx, const Tensor& dhead,
                                          Stream& stream) {
  OpArguments check("HeadCrossEntropy");
  FSDPD_RETURN_IF_ERROR(check.Matrix(head, "head"));
  const int64_t dim = head.shape[1];
  FSDPD_RETURN_IF_ERROR(check.Typed(targets, "targets", DType::kI32));
  const int64_t tokens = targets.numel();
  FSDPD_RETURN_IF_ERROR(check.Rows(
      x, "x", tokens, dim,
      absl::StrCat("one row per target of ", targets.Describe(), ", head is ", head.Describe())));
  FSDPD_RETURN_IF_ERROR(check.Typed(loss, "loss", DType::kF32));
  FSDPD_RETURN_IF_ERROR(check.Scalar(loss, "loss"));
  if (dx.data != nullptr) FSDPD_RETURN_IF_ERROR(check.Rows(dx, "dx", tokens, dim, "as x"));
  if (dhead.data != nullptr) FSDPD_RETURN_IF_ERROR(check.Shaped(dhead, "dhead", head.shape));
  if (tokens == 0) return check.Error("the mean over zero tokens is undefined");
  FSDPD_RETURN_IF_ERROR(NoOverlap(check, {{&loss, "loss"}, {&dx, "dx"}, {&dhead, "dhead"}},
                                  {{&x, "x"}, {&head, "head"}, {&targets, "targets"}}));
  return inner_->HeadCrossEntropy(x, head, targets, loss_scale, loss, dx, dhead, stream);
}

absl::Status CheckedOps::Cast(const Tensor& src, const Tensor& dst, Stream& stream) {
  OpArguments check("Cast");
  FSDPD_RETURN_IF_ERROR(check.Present(src, "src"));
  FSDPD_RETURN_IF_ERROR(check.SameCount(dst, "dst", src, "src"));
  // A copy (any dtype) may be in place; a conversion changes the element size, so it may not.
  if (src.dtype == dst.dtype) {
    FSDPD_RETURN_IF_ERROR(check.SameOrDisjoint(dst, "dst", src, "src"));
  } else if (src.dtype == DType::kI32 || dst.dtype == DType::kI32) {
    return check.Error(absl::StrCat("no conversion from ", src.Describe(), " to ", dst.Describe(),
                                    " (only between f32 and bf16)"));
  } else {
    FSDPD_RETURN_IF_ERROR(check.Disjoint(dst, "dst", src, "src"));
  }
  return inner_->Cast(src, dst, stream);
}

absl::Status CheckedOps::RoundToBf16(const Tensor& x, Stream& stream) {
  OpArguments check("RoundToBf16");
  FSDPD_RETURN_IF_ERROR(check.FloatingPoint(x, "x"));
  return inner_->RoundToBf16(x, stream);
}

absl::Status CheckedOps::Fill(const Tensor& x, float value, Stream& stream) {
  OpArguments check("Fill");
  FSDPD_RETURN_IF_ERROR(check.FloatingPoint(x, "x"));
  return inner_->Fill(x, value, stream);
}

absl::Status CheckedOps::Scale(const Tensor& x, float factor, Stream& stream) {
  OpArguments check("Scale");
  FSDPD_RETURN_IF_ERROR(check.FloatingPoint(x, "x"));
  return inner_->Scale(x, factor, stream);
}

absl::Status CheckedOps::SumOfSquares(const Tensor& x, const Tensor& result, Stream& stream) {
  OpArguments check("SumOfSquares");
  FSDPD_RETURN_IF_ERROR(check.FloatingPoint(x, "x"));
  FSDPD_RETURN_IF_ERROR(check.Typed(result, "result", DType::kF32));
  FSDPD_RETURN_IF_ERROR(check.Scalar(result, "result"));
  FSDPD_RETURN_IF_ERROR(check.Disjoint(result, "result", x, "x"));
  return inner_->SumOfSquares(x, result, stream);
}

absl::Status CheckedOps::AdamW(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                               const Tensor& exp_avg_sq, const AdamWParams& params,
                               Stream& stream) {
  FSDPD_RETURN_IF_ERROR(CheckAdamWArguments(param, grad, exp_avg, exp_avg_sq, params));
  return inner_->AdamW(param, grad, exp_avg, exp_avg_sq, params, stream);
}

absl::Status CheckedOps::AdamWWithGradSquareSum(const Tensor& param, const Tensor& grad,
                                                const Tensor& exp_avg, const Tensor& exp_avg_sq,
                                                const AdamWParams& params,
                                                const Tensor& grad_square_sum, Stream& stream) {
  OpArguments check("AdamWWithGradSquareSum");
  FSDPD_RETURN_IF_ERROR(check.Shaped(grad_square_sum, "grad_square_sum", {1}));
  FSDPD_RETURN_IF_ERROR(check.Typed(grad_square_sum, "grad_square_sum", DType::kF32));
  FSDPD_RETURN_IF_ERROR(NoOverlap(
      check, {{&grad_square_sum, "grad_square_sum"}},
      {{&param, "param"}, {&grad, "grad"}, {&exp_avg, "exp_avg"}, {&exp_avg_sq, "exp_avg_sq"}}));
  // The shards and hyperparameters as AdamW checks them.
  FSDPD_RETURN_IF_ERROR(CheckAdamWArguments(param, grad, exp_avg, exp_avg_sq, params));
  return inner_->AdamWWithGradSquareSum(param, grad, exp_avg, exp_avg_sq, params, grad_square_sum,
                                        stream);
}

absl::Status CheckedOps::AdamWSplitMaster(const Tensor& high, const Tensor& low, const Tensor& grad,
                                          const Tensor& exp_avg, const Tensor& exp_avg_sq,
                                          const AdamWParams& params, const Tensor& grad_square_sum,
                                          Stream& stream) {
  OpArguments check("AdamWSplitMaster");
  FSDPD_RETURN_IF_ERROR(check.Typed(high, "high", DType::kBF16));
  FSDPD_RETURN_IF_ERROR(check.Typed(low, "low", DType::kBF16));
  FSDPD_RETURN_IF_ERROR(check.SameCount(low, "low", high, "high"));
  FSDPD_RETURN_IF_ERROR(
      CheckGradientAndMoments(check, high, "high", grad, exp_avg, exp_avg_sq, params));
  FSDPD_RETURN_IF_ERROR(NoOverlap(
      check, {{&high, "high"}, {&low, "low"}, {&exp_avg, "exp_avg"}, {&exp_avg_sq, "exp_avg_sq"}},
      {{&grad, "grad"}}));
  if (grad_square_sum.data != nullptr) {
    FSDPD_RETURN_IF_ERROR(check.Shaped(grad_square_sum, "grad_square_sum", {1}));
    FSDPD_RETURN_IF_ERROR(check.Typed(grad_square_sum, "grad_square_sum", DType::kF32));
    FSDPD_RETURN_IF_ERROR(NoOverlap(check, {{&grad_square_sum, "grad_square_sum"}},
                                    {{&high, "high"},
                                     {&low, "low"},
                                     {&grad, "grad"},
                                     {&exp_avg, "exp_avg"},
                                     {&exp_avg_sq, "exp_avg_sq"}}));
  }
  return inner_->AdamWSplitMaster(high, low, grad, exp_avg, exp_avg_sq, params, grad_square_sum,
                                  stream);
}

}  // namespace fsdpd
