#include "worker/profiler/op_cost.h"

#include "absl/strings/str_join.h"

namespace fsdpd {
namespace {

double Bytes(const Tensor& tensor) {
  return tensor.data == nullptr ? 0.0 : static_cast<double>(tensor.bytes());
}

double Elements(const Tensor& tensor) {
  return tensor.data == nullptr ? 0.0 : static_cast<double>(tensor.numel());
}

// The last dimension, the one a row-wise op (RMSNorm, linear) reduces over.
int64_t LastDim(const Tensor& tensor) { return tensor.shape.empty() ? 1 : tensor.shape.back(); }

// Attention's B·S²·heads·hd from out[B, S, heads·hd], halved when causal.
double AttentionProductSize(const Tensor& out, bool causal) {
  if (out.shape.size() != 3) return 0.0;
  const double batch = static_cast<double>(out.shape[0]);
  const double seq = static_cast<double>(out.shape[1]);
  const double width = static_cast<double>(out.shape[2]);
  return batch * seq * seq * width * (causal ? 0.5 : 1.0);
}

}  // namespace

OpCost EmbeddingForwardCost(const Tensor& weight, const Tensor& tokens, const Tensor& out) {
  (void)weight;
  // Each token reads one row of the table and writes it out.
  return {0.0, Bytes(tokens) + 2.0 * Bytes(out)};
}

OpCost EmbeddingBackwardCost(const Tensor& dout, const Tensor& tokens, const Tensor& dweight) {
  (void)dweight;
  // One add per element; the touched rows of dweight are read and written.
  return {Elements(dout), Bytes(tokens) + 3.0 * Bytes(dout)};
}

OpCost RmsNormForwardCost(const Tensor& x, const Tensor& weight, const Tensor& out,
                          const Tensor& rstd) {
  // Square, sum, scale by rstd, scale by weight.
  return {4.0 * Elements(x), Bytes(x) + Bytes(weight) + Bytes(out) + Bytes(rstd)};
}

OpCost RmsNormBackwardCost(const Tensor& dout, const Tensor& x, const Tensor& weight,
                           const Tensor& rstd, const Tensor& dx, Write dx_write,
                           const Tensor& dweight) {
  // Accumulating reads dx as well as writing it, and adds once more an element.
  const bool accumulate = dx_write == Write::kAccumulate;
  return {(accumulate ? 9.0 : 8.0) * Elements(x),
          Bytes(dout) + Bytes(x) + Bytes(weight) + Bytes(rstd) +
              (accumulate ? 2.0 : 1.0) * Bytes(dx) + 2.0 * Bytes(dweight)};
}

OpCost LinearForwardCost(const Tensor& x, const Tensor& weight, const Tensor& bias,
                         const Tensor& out) {
  const double rows = Elements(x) / static_cast<double>(LastDim(x));
  const double flops = 2.0 * rows * Elements(weight) + (bias.data != nullptr ? Elements(out) : 0);
  return {flops, Bytes(x) + Bytes(weight) + Bytes(bias) + Bytes(out)};
}

OpCost LinearBackwardCost(const Tensor& dout, const Tensor& x, const Tensor& weight,
                          const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                          Write grad_write) {
  const double rows = Elements(x) / static_cast<double>(LastDim(x));
  const double product = 2.0 * rows * Elements(weight);
  // An accumulated gradient is read as well as written.
  const double gradient_passes = grad_write == Write::kAccumulate ? 2.0 : 1.0;
  double flops = 0.0;
  double bytes = Bytes(dout);
  if (dweight.data != nullptr) {  // dweight (+)= doutᵀ · x
    flops += product;
    bytes += Bytes(x) + gradient_passes * Bytes(dweight);
  }
  if (dx.data != nullptr) {  // dx = dout · weight
    flops += product;
    bytes += Bytes(weight) + Bytes(dx);
  }
  if (dbias.data != nullptr) {
    flops += Elements(dout);
    bytes += gradient_passes * Bytes(dbias);
  }
  return {flops, bytes};
}

OpCost AttentionForwardCost(const Tensor& qkv, bool causal, const Tensor& out, const Tensor& lse) {
  return {4.0 * AttentionProductSize(out, causal), Bytes(qkv) + Bytes(out) + Bytes(lse)};
}

OpCost AttentionBackwardCost(const Tensor& dout, const Tensor& qkv, const Tensor& out,
                             const Tensor& lse, bool causal, const Tensor& dqkv) {
  return {10.0 * AttentionProductSize(out, causal),
          Bytes(dout) + Bytes(qkv) + Bytes(out) + Bytes(lse) + Bytes(dqkv)};
}

OpCost RotaryCost(const Tensor& qkv, int64_t heads, int64_t kv_heads) {
  const int64_t columns = heads + 2 * kv_heads;
  if (columns <= 0) return {};
  // The share of each row that is q or k.
  const double rotated = static_cast<double>(heads + kv_heads) / static_cast<double>(columns);
  return {3.0 * rotated * Elements(qkv), 2.0 * rotated * Bytes(qkv)};
}

OpCost SwigluForwardCost(const Tensor& gate_up, const Tensor& out) {
  return {5.0 * Elements(out), Bytes(gate_up) + Bytes(out)};
}

OpCost SwigluBackwardCost(const Tensor& dout, const Tensor& gate_up, const Tensor& dgate_up,
                          const Tensor& out) {
  return {9.0 * Elements(dout) + 5.0 * Elements(out),
          Bytes(dout) + Bytes(gate_up) + Bytes(dgate_up) + Bytes(out)};
}

OpCost SiluForwardCost(const Tensor& x, const Tensor& out) {
  // exp, add, divide, multiply.
  return {4.0 * Elements(x), Bytes(x) + Bytes(out)};
}

OpCost SiluBackwardCost(const Tensor& dout, const Tensor& x, const Tensor& dx, const Tensor& out) {
  // The gradient's 7 operations, and the forward's 4 when `out` is written too.
  return {7.0 * Elements(x) + 4.0 * Elements(out), Bytes(dout) + Bytes(x) + Bytes(dx) + Bytes(out)};
}

OpCost AddCost(const Tensor& a, const Tensor& b, const Tensor& out) {
  return {Elements(out), Bytes(a) + Bytes(b) + Bytes(out)};
}

OpCost HeadCrossEntropyCost(const Tensor& x, const Tensor& head, const Tensor& targets,
                            const Tensor& dx, const Tensor& dhead) {
  const double tokens = Elements(x) / static_cast<double>(LastDim(x));
  const double vocab = head.shape.empty() ? 0.0 : static_cast<double>(head.shape[0]);
  // Three products of 2·T·V·D, and max, exp, sum, normalise over T·V logits.
  const double flops = 3.0 * 2.0 * tokens * Elements(head) + 4.0 * tokens * vocab;
  return {flops, Bytes(x) + Bytes(head) + Bytes(targets) + Bytes(dx) + 2.0 * Bytes(dhead)};
}

OpCost CastCost(const Tensor& src, const Tensor& dst) { return {0.0, Bytes(src) + Bytes(dst)}; }

OpCost RoundToBf16Cost(const Tensor& x) { return {Elements(x), 2.0 * Bytes(x)}; }

OpCost FillCost(const Tensor& x) { return {0.0, Bytes(x)}; }

OpCost ScaleCost(const Tensor& x) { return {Elements(x), 2.0 * Bytes(x)}; }

OpCost SumOfSquaresCost(const Tensor& x, const Tensor& result) {
  return {2.0 * Elements(x), Bytes(x) + Bytes(result)};
}

OpCost AdamWCost(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                 const Tensor& exp_avg_sq) {
  return {14.0 * Elements(param),
          2.0 * (Bytes(param) + Bytes(exp_avg) + Bytes(exp_avg_sq)) + Bytes(grad)};
}

std::string DescribeShapes(const std::vector<const Tensor*>& tensors) {
  std::vector<std::string> parts;
  for (const Tensor* tensor : tensors) {
    if (tensor->data != nullptr) parts.push_back(tensor->Describe());
  }
  return absl::StrJoin(parts, ", ");
}

}  // namespace fsdpd
