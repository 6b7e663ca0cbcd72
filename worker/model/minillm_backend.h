// The MiniLLM implementation shared by its two source files: minillm.cc (workspace, forward,
// evaluation) and minillm_backward.cc (the head's and the blocks' backward). Internal to the
// model; everything else uses MiniLLM. It also runs Llama (config.arch): the same pre-norm
// block, with the parameters of worker/model/parameter_names.h, no biases, rotary positions on
// q and k after the qkv product (and the inverse on their gradients), grouped-query attention,
// SwiGLU instead of SiLU, and the head tied to the embedding where asked; for MiniLLM the ops
// and their order are exactly MiniLLM's.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "worker/model/minillm.h"
#include "worker/model/parameter_names.h"

namespace fsdpd::minillm_internal {

// What one block's forward keeps for its backward. The two RMSNorm outputs and the SiLU
// output are not kept: backward recomputes them from what is kept (elementwise work, no
// matrix products), so a block holds 10·dim values per token (with its residual input)
// instead of 16. Activation recompute keeps less (ModelConfig::activation_recompute): with
// kFfn every block's ffn_hidden is one shared workspace that backward refills with ffn.0's
// GEMM (6·dim per token kept); with kBlock every block shares one whole set, refilled by
// re-running the block's forward, and only the block's input stays (1·dim).
struct BlockActivations {
  Tensor attention_rstd;  // norm1's rstd  [T] fp32
  Tensor qkv;             // [B, S, qkv_width] (3D for MiniLLM); llama's q and k rotated
  Tensor attention;       // heads concatenated, before out_proj  [B, S, D]
  Tensor lse;             // [B, H, S] fp32
  Tensor middle;          // x + attention branch  [T, D]
  Tensor ffn_rstd;        // norm2's rstd  [T] fp32
  Tensor ffn_hidden;      // ffn.0 output before SiLU  [T, F]; llama: gate and up  [T, 2F],
                          // which SwiGLU's backward overwrites with their gradient
};

// The FP8 operands whose producing op leaves their amax (Fp8OperandAmax in worker/backend/ops.h):
// norm1's output (qkv's x), norm2's (ffn.0's x), SiLU's (ffn.2's x), SiLU's backward's (ffn.0's
// dout), norm2's backward's (the residual stream's gradient that out_proj's backward reads) and
// norm1's backward's (the one the block below reads, ffn.2's dout there; the final norm's for
// the top block). The other operands (attention's output and input gradient, which cuDNN
// writes; the head's input gradient without a final norm; the weights; llama's SwiGLU tensors)
// are measured by the linear layer itself. One device float each. The residual gradient's
// amax crosses from one block's backward to the next, so it alternates between two slots by
// the parity of the block that reads it, at either end of the range: a block's backward zeroes
// the six contiguous slots other than the one it reads, its forward the five in the middle.
enum AmaxSlot {
  kResidualEven,
  kQkvX,
  kFfnInX,
  kFfnOutX,
  kFfnInDout,
  kOutDout,
  kResidualOdd,
  kAmaxSlots
};

class BackendMiniLLM : public MiniLLM {
 public:
  BackendMiniLLM(const ModelConfig& config, int64_t batch, int64_t seq, Backend* backend)
      : MiniLLM(config),
        backend_(backend),
        ops_(backend->ops()),
        stream_(backend->compute_stream()),
        batch_(batch),
        seq_(seq),
        tokens_(batch * seq) {}

  absl::Status AllocateWorkspace();

  absl::Status BeginStep(const int32_t* tokens, const int32_t* targets) override;
  absl::Status EmbedForward(const Tensor& root_params) override;
  absl::Status BlockForward(int layer, const Tensor& block_params) override;
  absl::Status HeadForwardBackward(const Tensor& root_params, const Tensor& root_grads,
                                   double loss_scale) override;
  absl::StatusOr<float> Loss() override;
  absl::Status BlockBackward(int layer, const Tensor& block_params,
                             const Tensor& block_grads) override;
  absl::Status EmbedBackward(const Tensor& root_grads) override;
  absl::Status Logits(const std::vector<Tensor>& unit_params, std::vector<float>* logits) override;

 private:
  // Progress through a step, so that calls out of order fail instead of reading stale data.
  enum class Phase { kIdle, kStepBegun, kForward, kBackward, kDone };

  absl::StatusOr<Tensor> NewTensor(DType dtype, std::vector<int64_t> shape);
  // Checks that `flat` can hold unit `unit_index` (padding allowed) in a float dtype.
  absl::Status CheckUnitTensor(const Tensor& flat, int unit_index, const char* what) const;
  Tensor Parameter(const Tensor& flat, int unit_index, const std::string& name) const;
  // The [rows, dim] matrix that starts at parameter `name` (llama's packed q, k, v and gate, up
  // span adjacent parameters), or an absent tensor for an empty name (no bias).
  Tensor Matrix(const Tensor& flat, int unit_index, const std::string& name, int64_t rows) const;
  Tensor Optional(const Tensor& flat, int unit_index, const std::string& name) const;
  absl::Status RunForwardOnly(const std::vector<Tensor>& unit_params);
  // Where block `layer`'s saved activations live (shared by every block under kBlock).
  BlockActivations& Saved(int layer);
  // Block `layer`'s forward up to ffn.0's output into Saved(layer): everything its backward
  // reads. Leaves norm2's output in row_scratch_.
  absl::Status ForwardToFfnHidden(int layer, const Tensor& block_params);
  // A block's linear layer in the products config_.matmul_dtype picks: Ops::LinearForward/
  // LinearBackward, or their FP8 twins. The head keeps the backend's own products.
  // `amax` is what the operands' producers left (FP8 only).
  absl::Status BlockLinearForward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                  const Tensor& out, const Fp8OperandAmax& amax = {});
  absl::Status BlockLinearBackward(const Tensor& dout, const Tensor& x, const Tensor& weight,
                                   const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                                   Write grad_write, const Fp8OperandAmax& amax = {});
  // The device float of `slot`, or an absent tensor where the producers leave no amax (bf16
  // products, or FSDPD_FP8_AMAX=separate).
  Tensor Amax(AmaxSlot slot) const;
  // The slot of the residual stream's gradient that block `layer`'s backward reads (layer -1:
  // the embedding's, unused): one of the two at the ends of the range, by the layer's parity.
  // ResidualAmax is its float; IncomingResidualAmax the same where that gradient's producer
  // leaves it: absent for the top block without a final norm (the head's input gradient).
  static AmaxSlot ResidualSlot(int layer);
  Tensor ResidualAmax(int layer) const;
  Tensor IncomingResidualAmax(int layer) const;
  // Zeroes slots [first, first + count) before producers raise them (nothing without slots).
  absl::Status ZeroAmaxes(AmaxSlot first, int count);
  // The input of the head: the last residual, or its final norm when enabled.
  absl::Status FinalNormForward(const Tensor& root_params, Tensor* head_input);

  Backend* backend_;
  Ops& ops_;
  Stream& stream_;
  int64_t batch_;
  int64_t seq_;
  int64_t tokens_;

  std::vector<std::unique_ptr<Buffer>> buffers_;
  Tensor token_ids_;
  Tensor target_ids_;
  std::vector<Tensor> residuals_;  // layers + 1 tensors [T, D]: the input of each block, then
                                   // the output of the last one
  std::vector<BlockActivations> blocks_;
  Tensor final_normed_;  // final norm output and rstd, when enabled
  Tensor final_rstd_;
  Tensor loss_;

  // Backward workspace, reused by every block.
  Tensor residual_gradient_;   // dL/d(residual stream) [T, D]
  Tensor normed_gradient_;     // gradient at a norm's output [T, D]
  Tensor attention_gradient_;  // [B, S, D], in one buffer with qkv_gradient_ after it, which
  Tensor qkv_gradient_;        // [B, S, qkv_width]  activated_gradient_ shares
                               // (AllocateWorkspace)
  // silu(ffn_hidden) (llama: silu(gate)·up), recomputed [T, F]; once ffn.2's backward has read
  // it, the gradient at ffn_hidden.
  Tensor activated_;
  Tensor activated_gradient_;  // [T, F]
  BlockParameterNames BlockParameters(int layer) const { return BlockNames(config_, layer); }
  const RootParameterNames root_names_ = RootNames(config_);
  // [T, D], holding in turn: a norm's output (forward, and recomputed in backward), then the
  // out_proj or ffn.2 output before its residual add.
  Tensor row_scratch_;
  Tensor fp8_amax_;  // [kAmaxSlots] fp32, where FP8 products take their producers' amax

  Phase phase_ = Phase::kIdle;
  int next_layer_ = 0;
  bool loss_queued_ = false;  // loss_ holds this step's loss once its work has run
  int forwarded_layer_ = -1;  // whose activations ForwardToFfnHidden last wrote
};

}  // namespace fsdpd::minillm_internal
