// The compute ops the model is written against, once, for every backend. The CPU backend
// computes in fp32 (kernels/cpu); the CUDA backend computes bf16 with fp32 accumulation
// (kernels/cuda). Activations use the backend's activation_dtype(); statistics that backward
// needs (RMSNorm's rstd, attention's log-sum-exp) are always fp32. Every op runs on the stream
// it is given, checks its shapes and dtypes, and returns a clear error on a mismatch.
//
// "Accumulate" outputs add into what is there (gradients of parameters used more than once);
// all other outputs are overwritten.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "worker/backend/tensor.h"

namespace fsdpd {

class Stream;

// How an op writes an output that may be summed into: a parameter's gradient is accumulated
// where the parameter is used more than once, and overwritten by its only (or first) use, which
// spares zeroing the buffer first; RmsNormBackward's dx may join the residual stream's gradient.
enum class Write { kOverwrite, kAccumulate };

struct AdamWParams {
  double lr = 3e-4;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
  int64_t step = 1;  // 1-based, for bias correction
};

// The amax (max |value|) of an FP8 linear layer's operand, left by the op that produced the
// operand in the pass that wrote it, so that Fp8LinearForward/Backward skip a pass of their own
// over it. A producer given an amax tensor (an fp32 scalar on its device) raises it to
// max |output| over the values it stores: the tensor must hold 0 before the producer runs, and
// then equals what the consumer would compute itself, bit for bit. An absent tensor
// (data == nullptr) asks for nothing, and a consumer given none computes the amax itself.
struct Fp8OperandAmax {
  Tensor x;     // max |x|
  Tensor dout;  // max |dout|, backward only
};

class Ops {
 public:
  virtual ~Ops() = default;

  // out[T, D] = weight[V, D][tokens[T]]
  virtual absl::Status EmbeddingForward(const Tensor& weight, const Tensor& tokens,
                                        const Tensor& out, Stream& stream) = 0;
  // dweight[V, D] += scatter of dout[T, D] by tokens (accumulate)
  virtual absl::Status EmbeddingBackward(const Tensor& dout, const Tensor& tokens,
                                         const Tensor& dweight, Stream& stream) = 0;

  // out = x · rsqrt(mean(x²) + eps) · weight over the last dim; rstd[T] saved (fp32); out_amax,
  // where present, raised to max |out| (Fp8OperandAmax).
  virtual absl::Status RmsNormForward(const Tensor& x, const Tensor& weight, double eps,
                                      const Tensor& out, const Tensor& rstd, const Tensor& out_amax,
                                      Stream& stream) = 0;
  // dx overwritten, or with dx_write kAccumulate added to (the residual stream's gradient,
  // without a separate add: on bf16 backends the sum is rounded once); dweight written as
  // dweight_write says; dx_amax, where present, raised to max |dx| as stored (Fp8OperandAmax).
  virtual absl::Status RmsNormBackward(const Tensor& dout, const Tensor& x, const Tensor& weight,
                                       const Tensor& rstd, const Tensor& dx, Write dx_write,
                                       const Tensor& dweight, Write dweight_write,
                                       const Tensor& dx_amax, Stream& stream) = 0;

  // out[M, N] = x[M, K] · weight[N, K]ᵀ (+ bias[N] if bias.data != nullptr)
  virtual absl::Status LinearForward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                     const Tensor& out, Stream& stream) = 0;
  // dx[M, K] = dout · weight (overwritten; skipped if dx.data == nullptr);
  // dweight[N, K] (+)= doutᵀ · x; dbias[N] (+)= Σ_rows dout (skipped if dbias.data == nullptr),
  // both written as grad_write says.
  virtual absl::Status LinearBackward(const Tensor& dout, const Tensor& x, const Tensor& weight,
                                      const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                                      Write grad_write, Stream& stream) = 0;

  // The same products in FP8 (parallel.matmul_dtype fp8): x and weight quantized to e4m3, dout
  // to e5m2, each with one scale per tensor from its own amax in this call (current scaling, so
  // nothing carries over between steps), products accumulated in fp32. The bias is added to the
  // output, and dbias summed from dout, unquantized. Every dimension (rows, in and out features)
  // must be a multiple of 16. CUDA: cuBLASLt's FP8 GEMMs (sm_89 or newer); CPU: the same
  // quantization, emulated in fp32 (kernels/cpu/fp8.h), the oracle of the CUDA side. `amax`
  // holds the operands' amaxes their producers left (Fp8OperandAmax); the scales come from
  // those where present.
  virtual absl::Status Fp8LinearForward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                        const Tensor& out, const Fp8OperandAmax& amax,
                                        Stream& stream) = 0;
  virtual absl::Status Fp8LinearBackward(const Tensor& dout, const Tensor& x, const Tensor& weight,
                                         const Tensor& dx, const Tensor& dweight,
                                         const Tensor& dbias, Write grad_write,
                                         const Fp8OperandAmax& amax, Stream& stream) = 0;

  // Grouped-query attention. qkv[B, S, (heads + 2·kv_heads)·hd] packs each token's row as
  // q (heads·hd) | k (kv_heads·hd) | v (kv_heads·hd), each split into heads of hd values;
  // kv_heads divides heads, and query head h reads kv head h / (heads / kv_heads). With
  // kv_heads == heads this is nn.MultiheadAttention's in_proj output (q | k | v, D = heads·hd).
  // out[B, S, heads·hd] = softmax(q·kᵀ/√hd [+ causal mask]) · v per query head, heads
  // concatenated; lse[B, heads, S] (fp32) saved for backward.
  virtual absl::Status AttentionForward(const Tensor& qkv, int64_t heads, int64_t kv_heads,
                                        bool causal, const Tensor& out, const Tensor& lse,
                                        Stream& stream) = 0;
  // dqkv, shaped as qkv, overwritten (a kv head's gradient sums over the query heads reading
  // it).
  virtual absl::Status AttentionBackward(const Tensor& dout, const Tensor& qkv, const Tensor& out,
                                         const Tensor& lse, int64_t heads, int64_t kv_heads,
                                         bool causal, const Tensor& dqkv, Stream& stream) = 0;

  // Rotary position embedding, in place on the q and k parts of qkv rows packed as attention
  // takes them (qkv[B, S, (heads + 2·kv_heads)·hd], hd even); v is left alone. The position of
  // a row is its index s within its sequence. Hugging Face's rotate_half convention: within
  // each head, values i and i + hd/2 (i < hd/2) form a pair rotated by the angle
  // s·inv_freq_i, inv_freq_i = theta^(−2i/hd), angle, cosine and sine computed in fp32:
  //   x'_i = x_i·cos − x_{i+hd/2}·sin,  x'_{i+hd/2} = x_{i+hd/2}·cos + x_i·sin.
  // With inverse, the opposite rotation (sin negated): the backward, applied to dqkv in place.
  virtual absl::Status Rotary(const Tensor& qkv, int64_t heads, int64_t kv_heads, double theta,
                              bool inverse, Stream& stream) = 0;

  // SwiGLU: gate_up[T, 2F] holds each row's gate (first F values) then up (last F), one GEMM's
  // output over the adjacent gate_proj and up_proj weights; out[T, F] = silu(gate) · up.
  virtual absl::Status SwigluForward(const Tensor& gate_up, const Tensor& out, Stream& stream) = 0;
  // dgate_up[T, 2F] overwritten: dgate = dout · up · silu'(gate), dup = dout · silu(gate).
  // dgate_up may be gate_up itself (in place). With out.data != nullptr also out = silu(gate)·up,
  // as SwigluForward writes it, from the same pass (the recompute down_proj's weight gradient
  // reads, as SiluBackward's out).
  virtual absl::Status SwigluBackward(const Tensor& dout, const Tensor& gate_up,
                                      const Tensor& dgate_up, const Tensor& out,
                                      Stream& stream) = 0;

  // out_amax, where present, raised to max |out| (Fp8OperandAmax).
  virtual absl::Status SiluForward(const Tensor& x, const Tensor& out, const Tensor& out_amax,
                                   Stream& stream) = 0;
  // dx overwritten (dx may be dout itself). With out.data != nullptr also out = silu(x), as
  // SiluForward writes it, from the same pass: the backward that recomputes the activation the
  // next product needs (the FFN's down projection's weight gradient). dx_amax and out_amax, where
  // present, raised to max |dx| and max |out| (out_amax needs out).
  virtual absl::Status SiluBackward(const Tensor& dout, const Tensor& x, const Tensor& dx,
                                    const Tensor& out, const Tensor& dx_amax,
                                    const Tensor& out_amax, Stream& stream) = 0;

  // out = a + b (out may alias a or b).
  virtual absl::Status Add(const Tensor& a, const Tensor& b, const Tensor& out, Stream& stream) = 0;

  // The head fused with mean cross-entropy over T = B·S tokens, without ever materialising
  // fp32 logits for all tokens at once: logits = x[T, D] · head[V, D]ᵀ, loss (fp32 scalar
  // tensor) = mean_t(logsumexp(logits_t) − logits_t[target_t]). Also writes dx[T, D]
  // (overwritten) and accumulates dhead[V, D], the gradients of that mean loss scaled by
  // loss_scale.
  virtual absl::Status HeadCrossEntropy(const Tensor& x, const Tensor& head, const Tensor& targets,
                                        double loss_scale, const Tensor& loss, const Tensor& dx,
                                        const Tensor& dhead, Stream& stream) = 0;

  // dst = src converted to dst's dtype (fp32 → bf16 rounds to nearest even). On CPU with
  // param_dtype bf16, `RoundToBf16` keeps fp32 storage but rounds the values through bf16.
  virtual absl::Status Cast(const Tensor& src, const Tensor& dst, Stream& stream) = 0;
  virtual absl::Status RoundToBf16(const Tensor& x, Stream& stream) = 0;

  virtual absl::Status Fill(const Tensor& x, float value, Stream& stream) = 0;
  virtual absl::Status Scale(const Tensor& x, float factor, Stream& stream) = 0;
  // result (fp32 scalar tensor) = Σ x² (for the global grad norm across shards).
  virtual absl::Status SumOfSquares(const Tensor& x, const Tensor& result, Stream& stream) = 0;

  // PyTorch's AdamW (decoupled weight decay, bias correction, eps outside the sqrt) over
  // a flat fp32 shard: param, grad, exp_avg, exp_avg_sq all of the same length.
  virtual absl::Status AdamW(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                             const Tensor& exp_avg_sq, const AdamWParams& params,
                             Stream& stream) = 0;
  // AdamW, and grad_square_sum (fp32 scalar tensor) = Σ grad² with the very bits
  // SumOfSquares(grad) gives, where a backend can from the same pass over the gradient (the
  // gradient norm of the optimizer in backward).
  virtual absl::Status AdamWWithGradSquareSum(const Tensor& param, const Tensor& grad,
                                              const Tensor& exp_avg, const Tensor& exp_avg_sq,
                                              const AdamWParams& params,
                                              const Tensor& grad_square_sum, Stream& stream) = 0;
  // AdamW over a master kept as two 16-bit halves (kernels/split_master.h): `high` (bf16) is
  // the parameters compute reads, `low` (16-bit, typed bf16) the rest of each fp32 value. Each
  // value is updated exactly as AdamW updates the joined fp32 value. With grad_square_sum given
  // (data non-null) it also leaves Σ grad² there, as AdamWWithGradSquareSum does.
  virtual absl::Status AdamWSplitMaster(const Tensor& high, const Tensor& low, const Tensor& grad,
                                        const Tensor& exp_avg, const Tensor& exp_avg_sq,
                                        const AdamWParams& params, const Tensor& grad_square_sum,
                                        Stream& stream) = 0;
};

// The declarations of every Ops member, for a class that implements them all (a backend's ops
// or a decorator): `class CpuOps : public Ops { public: FSDPD_OPS_OVERRIDES };`. Keep in step
// with the pure virtual list above.
#define FSDPD_OPS_OVERRIDES                                                                       \
  absl::Status EmbeddingForward(const Tensor& weight, const Tensor& tokens, const Tensor& out,    \
                                Stream& stream) override;                                         \
  absl::Status EmbeddingBackward(const Tensor& dout, const Tensor& tokens, const Tensor& dweight, \
                                 Stream& stream) override;                                        \
  absl::Status RmsNormForward(const Tensor& x, const Tensor& weight, double eps,                  \
                              const Tensor& out, const Tensor& rstd, const Tensor& out_amax,      \
                              Stream& stream) override;                                           \
  absl::Status RmsNormBackward(const Tensor& dout, const Tensor& x, const Tensor& weight,         \
                               const Tensor& rstd, const Tensor& dx, Write dx_write,              \
                               const Tensor& dweight, Write dweight_write, const Tensor& dx_amax, \
                               Stream& stream) override;                                          \
  absl::Status LinearForward(const Tensor& x, const Tensor& weight, const Tensor& bias,           \
                             const Tensor& out, Stream& stream) override;                         \
  absl::Status LinearBackward(const Tensor& dout, const Tensor& x, const Tensor& weight,          \
                              const Tensor& dx, const Tensor& dweight, const Tensor& dbias,       \
                              Write grad_write, Stream& stream) override;                         \
  absl::Status Fp8LinearForward(const Tensor& x, const Tensor& weight, const Tensor& bias,        \
                                const Tensor& out, const Fp8OperandAmax& amax, Stream& stream)    \
      override;                                                                                   \
  absl::Status Fp8LinearBackward(const Tensor& dout, const Tensor& x, const Tensor& weight,       \
                                 const Tensor& dx, const Tensor& dweight, const Tensor& dbias,    \
                                 Write grad_write, const Fp8OperandAmax& amax, Stream& stream)    \
      override;                                                                                   \
  absl::Status AttentionForward(const Tensor& qkv, int64_t heads, int64_t kv_heads, bool causal,  \
                                const Tensor& out, const Tensor& lse, Stream& stream) override;   \
  absl::Status AttentionBackward(const Tensor& dout, const Tensor& qkv, const Tensor& out,        \
                                 const Tensor& lse, int64_t heads, int64_t kv_heads, bool causal, \
                                 const Tensor& dqkv, Stream& stream) override;                    \
  absl::Status Rotary(const Tensor& qkv, int64_t heads, int64_t kv_heads, double theta,           \
                      bool inverse, Stream& stream) override;                                     \
  absl::Status SwigluForward(const Tensor& gate_up, const Tensor& out, Stream& stream) override;  \
  absl::Status SwigluBackward(const Tensor& dout, const Tensor& gate_up, const Tensor& dgate_up,  \
                              const Tensor& out, Stream& stream) override;                        \
  absl::Status SiluForward(const Tensor& x, const Tensor& out, const Tensor& out_amax,            \
                           Stream& stream) override;                                              \
  absl::Status SiluBackward(const Tensor& dout, const Tensor& x, const Tensor& dx,                \
                            const Tensor& out, const Tensor& dx_amax, const Tensor& out_amax,     \
                            Stream& stream) override;                                             \
  absl::Status Add(const Tensor& a, const Tensor& b, const Tensor& out, Stream& stream) override; \
  absl::Status HeadCrossEntropy(const Tensor& x, const Tensor& head, const Tensor& targets,       \
                                double loss_scale, const Tensor& loss, const Tensor& dx,          \
                                const Tensor& dhead, Stream& stream) override;                    \
  absl::Status Cast(const Tensor& src, const Tensor& dst, Stream& stream) override;               \
  absl::Status RoundToBf16(const Tensor& x, Stream& stream) override;                             \
  absl::Status Fill(const Tensor& x, float value, Stream& stream) override;                       \
  absl::Status Scale(const Tensor& x, float factor, Stream& stream) override;                     \
  absl::Status SumOfSquares(const Tensor& x, const Tensor& result, Stream& stream) override;      \
  absl::Status AdamW(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,              \
                     const Tensor& exp_avg_sq, const AdamWParams& params, Stream& stream)         \
      override;                                                                                   \
  absl::Status AdamWWithGradSquareSum(                                                            \
      const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,   \
      const AdamWParams& params, const Tensor& grad_square_sum, Stream& stream) override;         \
  absl::Status AdamWSplitMaster(const Tensor& high, const Tensor& low, const Tensor& grad,        \
                                const Tensor& exp_avg, const Tensor& exp_avg_sq,                  \
                                const AdamWParams& params, const Tensor& grad_square_sum,         \
                                Stream& stream) override;

}  // namespace fsdpd
