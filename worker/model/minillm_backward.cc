// MiniLLM's backward: the fused head and cross-entropy with the final norm, each block in
// reverse (recomputing what its forward did not keep), and the embedding.
#include <string>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "worker/model/minillm_backend.h"

namespace fsdpd::minillm_internal {

absl::Status BackendMiniLLM::HeadForwardBackward(const Tensor& root_params,
                                                 const Tensor& root_grads, double loss_scale) {
  if (phase_ != Phase::kForward || next_layer_ != config_.layers) {
    return absl::FailedPreconditionError(
        absl::StrCat("MiniLLM::HeadForwardBackward: every block's forward must run first (",
                     next_layer_, " of ", config_.layers, " done)"));
  }
  FSDPD_RETURN_IF_ERROR(CheckUnitTensor(root_params, root_unit(), "parameters"));
  FSDPD_RETURN_IF_ERROR(CheckUnitTensor(root_grads, root_unit(), "gradients"));
  Tensor head_input;
  FSDPD_RETURN_IF_ERROR(FinalNormForward(root_params, &head_input));
  const Tensor& head_input_gradient = config_.final_norm ? normed_gradient_ : residual_gradient_;
  FSDPD_RETURN_IF_ERROR(ZeroAmaxes(kResidualEven, kAmaxSlots));
  // A tied head's gradient joins the embedding's (both accumulate into the root's gradients).
  FSDPD_RETURN_IF_ERROR(ops_.HeadCrossEntropy(
      head_input, Parameter(root_params, root_unit(), root_names_.head), target_ids_, loss_scale,
      loss_, head_input_gradient, Parameter(root_grads, root_unit(), root_names_.head), stream_));
  if (config_.final_norm) {
    FSDPD_RETURN_IF_ERROR(ops_.RmsNormBackward(
        normed_gradient_, residuals_.back(), Parameter(root_params, root_unit(), root_names_.norm),
        final_rstd_, residual_gradient_, Write::kOverwrite,
        Parameter(root_grads, root_unit(), root_names_.norm), Write::kAccumulate,
        IncomingResidualAmax(static_cast<int>(config_.layers) - 1), stream_));
  }
  phase_ = Phase::kBackward;
  next_layer_ = static_cast<int>(config_.layers) - 1;
  loss_queued_ = true;
  return absl::OkStatus();
}

absl::StatusOr<float> BackendMiniLLM::Loss() {
  if (!loss_queued_) {
    return absl::FailedPreconditionError("MiniLLM::Loss: no HeadForwardBackward has run");
  }
  float loss = 0.0f;
  FSDPD_RETURN_IF_ERROR(backend_->CopyToHost(loss_, &loss, stream_));
  FSDPD_RETURN_IF_ERROR(stream_.Synchronize());
  return loss;
}

absl::Status BackendMiniLLM::BlockBackward(int layer, const Tensor& block_params,
                                           const Tensor& block_grads) {
  if (phase_ != Phase::kBackward || layer != next_layer_) {
    return absl::FailedPreconditionError(
        absl::StrCat("MiniLLM::BlockBackward(", layer, "): expected ",
                     phase_ == Phase::kBackward ? absl::StrCat("layer ", next_layer_)
                                                : "HeadForwardBackward first"));
  }
  FSDPD_RETURN_IF_ERROR(CheckUnitTensor(block_params, layer, "parameters"));
  FSDPD_RETURN_IF_ERROR(CheckUnitTensor(block_grads, layer, "gradients"));
  const BlockParameterNames names = BlockParameters(layer);
  auto weight = [&](const std::string& name) { return Parameter(block_params, layer, name); };
  auto gradient = [&](const std::string& name) { return Parameter(block_grads, layer, name); };
  auto bias_gradient = [&](const std::string& name) { return Optional(block_grads, layer, name); };
  const Tensor qkv_weight = Matrix(block_params, layer, names.qkv, config_.qkv_width());
  const Tensor qkv_weight_gradient = Matrix(block_grads, layer, names.qkv, config_.qkv_width());
  const Tensor ffn_in_weight = Matrix(block_params, layer, names.ffn_in, config_.ffn_in_width());
  const Tensor ffn_in_weight_gradient =
      Matrix(block_grads, layer, names.ffn_in, config_.ffn_in_width());
  const BlockActivations& saved = Saved(layer);
  const Tensor& input = residuals_[static_cast<size_t>(layer)];
  const Tensor no_bias;

  // The FP8 slots start at zero for the producers below (ForwardToFfnHidden zeroes the middle
  // five again), all but the one holding the amax of the residual gradient this block reads.
  const Tensor residual_amax = IncomingResidualAmax(layer);
  FSDPD_RETURN_IF_ERROR(
      ZeroAmaxes(ResidualSlot(layer) == kResidualEven ? kQkvX : kResidualEven, kAmaxSlots - 1));
  // Recompute what was not kept. Both ways leave norm2's output in row_scratch_ and rewrite
  // the saved statistics with the very same values. The block whose forward ran last still has
  // its shared set (its backward comes first): it needs only norm2 again.
  const ActivationRecompute recompute = config_.activation_recompute;
  if (recompute != ActivationRecompute::kNone) {
    if (recompute == ActivationRecompute::kBlock && forwarded_layer_ != layer) {
      FSDPD_RETURN_IF_ERROR(ForwardToFfnHidden(layer, block_params));
    } else {
      FSDPD_RETURN_IF_ERROR(ops_.RmsNormForward(saved.middle, weight(names.ffn_norm),
                                                config_.norm_eps, row_scratch_, saved.ffn_rstd,
                                                Amax(kFfnInX), stream_));
      if (forwarded_layer_ != layer) {
        FSDPD_RETURN_IF_ERROR(BlockLinearForward(row_scratch_, ffn_in_weight, no_bias,
                                                 saved.ffn_hidden, {Amax(kFfnInX)}));
      }
    }
    forwarded_layer_ = -1;  // the shared set is this block's now, and is consumed below
  }

  // Each of the block's parameters is used once, so its gradient is written, not accumulated:
  // block_grads needs no zeroing (Write::kOverwrite below).
  // FFN branch: output = middle + ffn.2(silu(ffn.0(norm2(middle)))) (llama: down_proj of
  // silu(gate)·up). ffn.2's input gradient first; then one pass over ffn_hidden turns it into
  // the gradient at ffn_hidden (in place; llama's over the saved gate and up) and recomputes
  // the activation, which ffn.2's weight gradient reads last.
  const Tensor& hidden_gradient = config_.llama() ? saved.ffn_hidden : activated_gradient_;
  // SiLU's backward measures its two outputs for the products that read them; llama's SwiGLU
  // leaves that to the products.
  const Tensor silu_out_amax = config_.llama() ? Tensor{} : Amax(kFfnOutX);
  const Tensor silu_dx_amax = config_.llama() ? Tensor{} : Amax(kFfnInDout);
  FSDPD_RETURN_IF_ERROR(BlockLinearBackward(residual_gradient_, activated_, weight(names.ffn_out),
                                            activated_gradient_, Tensor{}, no_bias,
                                            Write::kOverwrite, {Tensor{}, residual_amax}));
  if (config_.llama()) {
    FSDPD_RETURN_IF_ERROR(ops_.SwigluBackward(activated_gradient_, saved.ffn_hidden,
                                              hidden_gradient, activated_, stream_));
  } else {
    FSDPD_RETURN_IF_ERROR(ops_.SiluBackward(activated_gradient_, saved.ffn_hidden, hidden_gradient,
                                            activated_, silu_dx_amax, silu_out_amax, stream_));
  }
  FSDPD_RETURN_IF_ERROR(BlockLinearBackward(residual_gradient_, activated_, weight(names.ffn_out),
                                            Tensor{}, gradient(names.ffn_out), no_bias,
                                            Write::kOverwrite, {silu_out_amax, residual_amax}));
  if (recompute == ActivationRecompute::kNone) {
    // norm2's output, recomputed (its rstd is rewritten with the very same values).
    FSDPD_RETURN_IF_ERROR(ops_.RmsNormForward(saved.middle, weight(names.ffn_norm),
                                              config_.norm_eps, row_scratch_, saved.ffn_rstd,
                                              Amax(kFfnInX), stream_));
  }
  FSDPD_RETURN_IF_ERROR(BlockLinearBackward(hidden_gradient, row_scratch_, ffn_in_weight,
                                            normed_gradient_, ffn_in_weight_gradient, no_bias,
                                            Write::kOverwrite, {Amax(kFfnInX), silu_dx_amax}));
  // The norm's input gradient joins the residual stream's inside the norm's backward.
  FSDPD_RETURN_IF_ERROR(ops_.RmsNormBackward(
      normed_gradient_, saved.middle, weight(names.ffn_norm), saved.ffn_rstd, residual_gradient_,
      Write::kAccumulate, gradient(names.ffn_norm), Write::kOverwrite, Amax(kOutDout), stream_));

  // Attention branch: middle = input + out_proj(attention(in_proj(norm1(input)))) (llama: q and
  // k rotated between the qkv product and attention, so their gradients are rotated back).
  FSDPD_RETURN_IF_ERROR(BlockLinearBackward(residual_gradient_, saved.attention, weight(names.out),
                                            attention_gradient_, gradient(names.out),
                                            bias_gradient(names.out_bias), Write::kOverwrite,
                                            {Tensor{}, Amax(kOutDout)}));
  FSDPD_RETURN_IF_ERROR(ops_.AttentionBackward(
      attention_gradient_, saved.qkv, saved.attention, saved.lse, config_.heads,
      config_.attention_kv_heads(), config_.causal, qkv_gradient_, stream_));
  if (config_.llama()) {
    FSDPD_RETURN_IF_ERROR(ops_.Rotary(qkv_gradient_, config_.heads, config_.kv_heads,
                                      config_.rope_theta, /*inverse=*/true, stream_));
  }
  FSDPD_RETURN_IF_ERROR(ops_.RmsNormForward(input, weight(names.attention_norm), config_.norm_eps,
                                            row_scratch_, saved.attention_rstd, Amax(kQkvX),
                                            stream_));
  FSDPD_RETURN_IF_ERROR(BlockLinearBackward(
      qkv_gradient_, row_scratch_, qkv_weight, normed_gradient_, qkv_weight_gradient,
      bias_gradient(names.qkv_bias), Write::kOverwrite, {Amax(kQkvX)}));
  FSDPD_RETURN_IF_ERROR(ops_.RmsNormBackward(normed_gradient_, input, weight(names.attention_norm),
                                             saved.attention_rstd, residual_gradient_,
                                             Write::kAccumulate, gradient(names.attention_norm),
                                             Write::kOverwrite, ResidualAmax(layer - 1), stream_));
  --next_layer_;
  return absl::OkStatus();
}

absl::Status BackendMiniLLM::EmbedBackward(const Tensor& root_grads) {
  if (phase_ != Phase::kBackward || next_layer_ != -1) {
    return absl::FailedPreconditionError(
        "MiniLLM::EmbedBackward: HeadForwardBackward and every block's backward must run first");
  }
  FSDPD_RETURN_IF_ERROR(CheckUnitTensor(root_grads, root_unit(), "gradients"));
  FSDPD_RETURN_IF_ERROR(
      ops_.EmbeddingBackward(residual_gradient_, token_ids_,
                             Parameter(root_grads, root_unit(), root_names_.embedding), stream_));
  phase_ = Phase::kDone;
  return absl::OkStatus();
}

}  // namespace fsdpd::minillm_internal
