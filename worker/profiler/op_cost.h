// The analytic cost of each op from its tensor shapes: floating-point operations and the bytes it
// must move at the least (every input read once, every output written once, accumulated
// outputs read and written). The kernel table's roofline estimate divides these by the measured
// time where hardware counters cannot be read. Matrix products count 2 FLOPs per
// multiply-add; attention counts its matrix products only (the softmax is a few percent);
// elementwise ops count their arithmetic per element.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "worker/backend/ops.h"
#include "worker/backend/tensor.h"

namespace fsdpd {

struct OpCost {
  double flops = 0.0;
  double bytes = 0.0;
};

OpCost EmbeddingForwardCost(const Tensor& weight, const Tensor& tokens, const Tensor& out);
OpCost EmbeddingBackwardCost(const Tensor& dout, const Tensor& tokens, const Tensor& dweight);
OpCost RmsNormForwardCost(const Tensor& x, const Tensor& weight, const Tensor& out,
                          const Tensor& rstd);
OpCost RmsNormBackwardCost(const Tensor& dout, const Tensor& x, const Tensor& weight,
                           const Tensor& rstd, const Tensor& dx, Write dx_write,
                           const Tensor& dweight);
// x[M, K] · weight[N, K]ᵀ (+ bias).
OpCost LinearForwardCost(const Tensor& x, const Tensor& weight, const Tensor& bias,
                         const Tensor& out);
// dx (when present) and dweight products, plus the bias gradient's row sum.
OpCost LinearBackwardCost(const Tensor& dout, const Tensor& x, const Tensor& weight,
                          const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                          Write grad_write);
// out[B, S, heads·hd]: q·kᵀ and p·v, 2·B·S²·heads·hd FLOPs each (grouped or not), halved under
// a causal mask. The bytes are a flash-style kernel's: qkv in, out and the log-sum-exp out, no
// S×S matrix.
OpCost AttentionForwardCost(const Tensor& qkv, bool causal, const Tensor& out, const Tensor& lse);
// Flash-style backward recomputes the scores: five S×S products (q·kᵀ, dv, dp, dq, dk).
OpCost AttentionBackwardCost(const Tensor& dout, const Tensor& qkv, const Tensor& out,
                             const Tensor& lse, bool causal, const Tensor& dqkv);
// The q and k parts of qkv read and written; a rotated pair costs 6 FLOPs (four products, two
// sums), its angle's cosine and sine not counted.
OpCost RotaryCost(const Tensor& qkv, int64_t heads, int64_t kv_heads);
// silu(gate)·up: SiLU's 4 operations and a product per output.
OpCost SwigluForwardCost(const Tensor& gate_up, const Tensor& out);
// Both halves' gradients (about 9 operations per output), and the forward's 5 when `out` is
// written too.
OpCost SwigluBackwardCost(const Tensor& dout, const Tensor& gate_up, const Tensor& dgate_up,
                          const Tensor& out);
OpCost SiluForwardCost(const Tensor& x, const Tensor& out);
OpCost SiluBackwardCost(const Tensor& dout, const Tensor& x, const Tensor& dx, const Tensor& out);
OpCost AddCost(const Tensor& a, const Tensor& b, const Tensor& out);
// x[T, D], head[V, D]: logits, dx and dhead products (3 · 2·T·V·D) plus the softmax; logits
// are never written, dhead is accumulated.
OpCost HeadCrossEntropyCost(const Tensor& x, const Tensor& head, const Tensor& targets,
                            const Tensor& dx, const Tensor& dhead);
OpCost CastCost(const Tensor& src, const Tensor& dst);
OpCost RoundToBf16Cost(const Tensor& x);
OpCost FillCost(const Tensor& x);
OpCost ScaleCost(const Tensor& x);
OpCost SumOfSquaresCost(const Tensor& x, const Tensor& result);
// param, exp_avg, exp_avg_sq read and written, grad read; about 14 FLOPs per element.
OpCost AdamWCost(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                 const Tensor& exp_avg_sq);

// "f32[8, 16]", the shapes of an op's inputs for the trace, joined by ", ".
std::string DescribeShapes(const std::vector<const Tensor*>& tensors);

}  // namespace fsdpd
