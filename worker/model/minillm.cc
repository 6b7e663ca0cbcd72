#include "worker/model/minillm.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "worker/status_macros.h"

namespace fsdpd {
namespace {

// What one block's forward keeps for its backward. The two RMSNorm outputs and the SiLU
// output are not kept: backward recomputes them from what is kept (elementwise work, no
// matrix products), so a block holds 10·dim values per token (with its residual input)
// instead of 16. Activation recompute keeps less (ModelConfig::activation_recompute): with
// kFfn every block's ffn_hidden is one shared workspace that backward refills with ffn.0's
// GEMM (6·dim per token kept); with kBlock every block shares one whole set, refilled by
// re-running the block's forward, and only the block's input stays (1·dim).
struct BlockActivations {
  Tensor attention_rstd;  // norm1's rstd  [T] fp32
  Tensor qkv;             // [B, S, 3D]
  Tensor attention;       // heads concatenated, before out_proj  [B, S, D]
  Tensor lse;             // [B, H, S] fp32
  Tensor middle;          // x + attention branch  [T, D]
  Tensor ffn_rstd;        // norm2's rstd  [T] fp32
  Tensor ffn_hidden;      // ffn.0 output before SiLU  [T, F]
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
  absl::StatusOr<float> HeadForwardBackward(const Tensor& root_params, const Tensor& root_grads,
                                            double loss_scale) override;
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
  absl::Status RunForwardOnly(const std::vector<Tensor>& unit_params);
  // Where block `layer`'s saved activations live (shared by every block under kBlock).
  BlockActivations& Saved(int layer);
  // Block `layer`'s forward up to ffn.0's output into Saved(layer): everything its backward
  // reads. Leaves norm2's output in row_scratch_.
  absl::Status ForwardToFfnHidden(int layer, const Tensor& block_params);
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
  Tensor branch_gradient_;     // gradient from a norm back to the residual [T, D]
  Tensor attention_gradient_;  // [B, S, D]
  Tensor qkv_gradient_;        // [B, S, 3D]
  // silu(ffn_hidden), recomputed [T, F]; once ffn.2's backward has read it, the gradient at
  // ffn_hidden.
  Tensor activated_;
  Tensor activated_gradient_;  // [T, F]
  // [T, D], holding in turn: a norm's output (forward, and recomputed in backward), then the
  // out_proj or ffn.2 output before its residual add.
  Tensor row_scratch_;

  Phase phase_ = Phase::kIdle;
  int next_layer_ = 0;
  int forwarded_layer_ = -1;  // whose activations ForwardToFfnHidden last wrote
};

absl::StatusOr<Tensor> BackendMiniLLM::NewTensor(DType dtype, std::vector<int64_t> shape) {
  Tensor tensor{nullptr, dtype, std::move(shape)};
  absl::StatusOr<std::unique_ptr<Buffer>> buffer = backend_->Allocate(tensor.bytes());
  if (!buffer.ok()) {
    return absl::Status(
        buffer.status().code(),
        absl::StrCat("MiniLLM activations (", tensor.Describe(), "): ", buffer.status().message()));
  }
  tensor.data = (*buffer)->data();
  buffers_.push_back(std::move(*buffer));
  return tensor;
}

absl::Status BackendMiniLLM::AllocateWorkspace() {
  const DType act = backend_->activation_dtype();
  const int64_t dim = config_.dim;
  const int64_t hidden = config_.ffn_hidden;
  const std::vector<int64_t> rows_by_dim = {tokens_, dim};
  const std::vector<int64_t> rows_by_hidden = {tokens_, hidden};
  const std::vector<int64_t> sequence_by_dim = {batch_, seq_, dim};
  const std::vector<int64_t> sequence_by_qkv = {batch_, seq_, 3 * dim};
  // Assigns a fresh tensor or returns the allocation error.
#define FSDPD_NEW(target, dtype, shape)                       \
  do {                                                        \
    absl::StatusOr<Tensor> tensor_ = NewTensor(dtype, shape); \
    if (!tensor_.ok()) return tensor_.status();               \
    target = *tensor_;                                        \
  } while (false)

  FSDPD_NEW(token_ids_, DType::kI32, (std::vector<int64_t>{batch_, seq_}));
  FSDPD_NEW(target_ids_, DType::kI32, (std::vector<int64_t>{batch_, seq_}));
  FSDPD_NEW(loss_, DType::kF32, (std::vector<int64_t>{1}));
  residuals_.resize(static_cast<size_t>(config_.layers) + 1);
  for (Tensor& residual : residuals_) FSDPD_NEW(residual, act, rows_by_dim);
  const ActivationRecompute recompute = config_.activation_recompute;
  blocks_.resize(recompute == ActivationRecompute::kBlock ? 1
                                                          : static_cast<size_t>(config_.layers));
  Tensor shared_hidden;
  if (recompute != ActivationRecompute::kNone) FSDPD_NEW(shared_hidden, act, rows_by_hidden);
  for (BlockActivations& block : blocks_) {
    FSDPD_NEW(block.attention_rstd, DType::kF32, (std::vector<int64_t>{tokens_}));
    FSDPD_NEW(block.qkv, act, sequence_by_qkv);
    FSDPD_NEW(block.attention, act, sequence_by_dim);
    FSDPD_NEW(block.lse, DType::kF32, (std::vector<int64_t>{batch_, config_.heads, seq_}));
    FSDPD_NEW(block.middle, act, rows_by_dim);
    FSDPD_NEW(block.ffn_rstd, DType::kF32, (std::vector<int64_t>{tokens_}));
    if (recompute == ActivationRecompute::kNone) {
      FSDPD_NEW(block.ffn_hidden, act, rows_by_hidden);
    } else {
      block.ffn_hidden = shared_hidden;
    }
  }
  if (config_.final_norm) {
    FSDPD_NEW(final_normed_, act, rows_by_dim);
    FSDPD_NEW(final_rstd_, DType::kF32, (std::vector<int64_t>{tokens_}));
  }
  FSDPD_NEW(residual_gradient_, act, rows_by_dim);
  FSDPD_NEW(normed_gradient_, act, rows_by_dim);
  FSDPD_NEW(branch_gradient_, act, rows_by_dim);
  FSDPD_NEW(attention_gradient_, act, sequence_by_dim);
  FSDPD_NEW(qkv_gradient_, act, sequence_by_qkv);
  FSDPD_NEW(activated_, act, rows_by_hidden);
  FSDPD_NEW(activated_gradient_, act, rows_by_hidden);
  FSDPD_NEW(row_scratch_, act, rows_by_dim);
#undef FSDPD_NEW
  return absl::OkStatus();
}

absl::Status BackendMiniLLM::CheckUnitTensor(const Tensor& flat, int unit_index,
                                             const char* what) const {
  const UnitLayout& unit = units_[static_cast<size_t>(unit_index)];
  if (flat.data == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("MiniLLM: ", what, " of unit ", unit.name,
                                                   " has no data (", flat.Describe(), ")"));
  }
  if (flat.dtype == DType::kI32 || flat.numel() < unit.numel) {
    return absl::InvalidArgumentError(absl::StrCat("MiniLLM: ", what, " of unit ", unit.name,
                                                   " must be f32 or bf16 with at least ",
                                                   unit.numel, " elements, got ", flat.Describe()));
  }
  return absl::OkStatus();
}

Tensor BackendMiniLLM::Parameter(const Tensor& flat, int unit_index,
                                 const std::string& name) const {
  const ParameterInfo& info = units_[static_cast<size_t>(unit_index)].Find(name);
  return Tensor{static_cast<char*>(flat.data) + info.offset * DTypeSize(flat.dtype), flat.dtype,
                info.shape};
}

absl::Status BackendMiniLLM::BeginStep(const int32_t* tokens, const int32_t* targets) {
  if (tokens == nullptr || targets == nullptr) {
    return absl::InvalidArgumentError("MiniLLM::BeginStep: tokens and targets are required");
  }
  // Checked here, on the host, so that no backend has to check ids on the device.
  for (const auto& [ids, what] :
       {std::pair<const int32_t*, const char*>{tokens, "token"}, {targets, "target"}}) {
    for (int64_t t = 0; t < tokens_; ++t) {
      if (ids[t] < 0 || ids[t] >= config_.vocab) {
        return absl::InvalidArgumentError(absl::StrCat("MiniLLM::BeginStep: ", what, " ", ids[t],
                                                       " at position ", t, " is outside [0, ",
                                                       config_.vocab, ")"));
      }
    }
  }
  FSDPD_RETURN_IF_ERROR(backend_->CopyToDevice(tokens, token_ids_, stream_));
  FSDPD_RETURN_IF_ERROR(backend_->CopyToDevice(targets, target_ids_, stream_));
  phase_ = Phase::kStepBegun;
  return absl::OkStatus();
}

absl::Status BackendMiniLLM::EmbedForward(const Tensor& root_params) {
  if (phase_ == Phase::kIdle) {
    return absl::FailedPreconditionError("MiniLLM::EmbedForward: BeginStep was not called");
  }
  FSDPD_RETURN_IF_ERROR(CheckUnitTensor(root_params, root_unit(), "parameters"));
  FSDPD_RETURN_IF_ERROR(ops_.EmbeddingForward(Parameter(root_params, root_unit(), "embed.weight"),
                                              token_ids_, residuals_[0], stream_));
  phase_ = Phase::kForward;
  next_layer_ = 0;
  return absl::OkStatus();
}

absl::Status BackendMiniLLM::BlockForward(int layer, const Tensor& block_params) {
  if (phase_ != Phase::kForward || layer != next_layer_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "MiniLLM::BlockForward(", layer, "): expected ",
        phase_ == Phase::kForward ? absl::StrCat("layer ", next_layer_) : "EmbedForward first"));
  }
  FSDPD_RETURN_IF_ERROR(CheckUnitTensor(block_params, layer, "parameters"));
  FSDPD_RETURN_IF_ERROR(ForwardToFfnHidden(layer, block_params));
  const std::string prefix = absl::StrCat("layers.", layer, ".");
  const BlockActivations& saved = Saved(layer);
  const Tensor no_bias;
  FSDPD_RETURN_IF_ERROR(ops_.SiluForward(saved.ffn_hidden, activated_, stream_));
  FSDPD_RETURN_IF_ERROR(ops_.LinearForward(activated_,
                                           Parameter(block_params, layer, prefix + "ffn.2.weight"),
                                           no_bias, row_scratch_, stream_));
  FSDPD_RETURN_IF_ERROR(
      ops_.Add(saved.middle, row_scratch_, residuals_[static_cast<size_t>(layer) + 1], stream_));
  ++next_layer_;
  return absl::OkStatus();
}

BlockActivations& BackendMiniLLM::Saved(int layer) {
  return config_.activation_recompute == ActivationRecompute::kBlock
             ? blocks_.front()
             : blocks_[static_cast<size_t>(layer)];
}

absl::Status BackendMiniLLM::ForwardToFfnHidden(int layer, const Tensor& block_params) {
  const std::string prefix = absl::StrCat("layers.", layer, ".");
  auto weight = [&](const char* name) { return Parameter(block_params, layer, prefix + name); };
  BlockActivations& saved = Saved(layer);
  const Tensor& input = residuals_[static_cast<size_t>(layer)];
  forwarded_layer_ = layer;

  FSDPD_RETURN_IF_ERROR(ops_.RmsNormForward(input, weight("norm1.weight"), config_.norm_eps,
                                            row_scratch_, saved.attention_rstd, stream_));
  FSDPD_RETURN_IF_ERROR(ops_.LinearForward(row_scratch_, weight("attn.in_proj_weight"),
                                           weight("attn.in_proj_bias"), saved.qkv, stream_));
  FSDPD_RETURN_IF_ERROR(ops_.AttentionForward(saved.qkv, config_.heads, config_.causal,
                                              saved.attention, saved.lse, stream_));
  FSDPD_RETURN_IF_ERROR(ops_.LinearForward(saved.attention, weight("attn.out_proj.weight"),
                                           weight("attn.out_proj.bias"), row_scratch_, stream_));
  FSDPD_RETURN_IF_ERROR(ops_.Add(input, row_scratch_, saved.middle, stream_));

  FSDPD_RETURN_IF_ERROR(ops_.RmsNormForward(saved.middle, weight("norm2.weight"), config_.norm_eps,
                                            row_scratch_, saved.ffn_rstd, stream_));
  const Tensor no_bias;
  return ops_.LinearForward(row_scratch_, weight("ffn.0.weight"), no_bias, saved.ffn_hidden,
                            stream_);
}

absl::Status BackendMiniLLM::FinalNormForward(const Tensor& root_params, Tensor* head_input) {
  const Tensor& last = residuals_.back();
  if (!config_.final_norm) {
    *head_input = last;
    return absl::OkStatus();
  }
  FSDPD_RETURN_IF_ERROR(ops_.RmsNormForward(last,
                                            Parameter(root_params, root_unit(), "norm.weight"),
                                            config_.norm_eps, final_normed_, final_rstd_, stream_));
  *head_input = final_normed_;
  return absl::OkStatus();
}

absl::StatusOr<float> BackendMiniLLM::HeadForwardBackward(const Tensor& root_params,
                                                          const Tensor& root_grads,
                                                          double loss_scale) {
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
  FSDPD_RETURN_IF_ERROR(ops_.HeadCrossEntropy(
      head_input, Parameter(root_params, root_unit(), "head.weight"), target_ids_, loss_scale,
      loss_, head_input_gradient, Parameter(root_grads, root_unit(), "head.weight"), stream_));
  if (config_.final_norm) {
    FSDPD_RETURN_IF_ERROR(ops_.RmsNormBackward(
        normed_gradient_, residuals_.back(), Parameter(root_params, root_unit(), "norm.weight"),
        final_rstd_, residual_gradient_, Parameter(root_grads, root_unit(), "norm.weight"),
        stream_));
  }
  float loss = 0.0f;
  FSDPD_RETURN_IF_ERROR(backend_->CopyToHost(loss_, &loss, stream_));
  FSDPD_RETURN_IF_ERROR(stream_.Synchronize());
  phase_ = Phase::kBackward;
  next_layer_ = static_cast<int>(config_.layers) - 1;
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
  const std::string prefix = absl::StrCat("layers.", layer, ".");
  auto weight = [&](const char* name) { return Parameter(block_params, layer, prefix + name); };
  auto gradient = [&](const char* name) { return Parameter(block_grads, layer, prefix + name); };
  const BlockActivations& saved = Saved(layer);
  const Tensor& input = residuals_[static_cast<size_t>(layer)];
  const Tensor no_bias;

  // Recompute what was not kept. Both ways leave norm2's output in row_scratch_ and rewrite
  // the saved statistics with the very same values. The block whose forward ran last still has
  // its shared set (its backward comes first): it needs only norm2 again.
  const ActivationRecompute recompute = config_.activation_recompute;
  if (recompute != ActivationRecompute::kNone) {
    if (recompute == ActivationRecompute::kBlock && forwarded_layer_ != layer) {
      FSDPD_RETURN_IF_ERROR(ForwardToFfnHidden(layer, block_params));
    } else {
      FSDPD_RETURN_IF_ERROR(ops_.RmsNormForward(saved.middle, weight("norm2.weight"),
                                                config_.norm_eps, row_scratch_, saved.ffn_rstd,
                                                stream_));
      if (forwarded_layer_ != layer) {
        FSDPD_RETURN_IF_ERROR(ops_.LinearForward(row_scratch_, weight("ffn.0.weight"), no_bias,
                                                 saved.ffn_hidden, stream_));
      }
    }
    forwarded_layer_ = -1;  // the shared set is this block's now, and is consumed below
  }

  // FFN branch: output = middle + ffn.2(silu(ffn.0(norm2(middle)))).
  FSDPD_RETURN_IF_ERROR(ops_.SiluForward(saved.ffn_hidden, activated_, stream_));
  FSDPD_RETURN_IF_ERROR(ops_.LinearBackward(residual_gradient_, activated_, weight("ffn.2.weight"),
                                            activated_gradient_, gradient("ffn.2.weight"), no_bias,
                                            stream_));
  // ffn.2's backward has read silu's output: its buffer now takes the gradient at ffn_hidden.
  const Tensor& hidden_gradient = activated_;
  FSDPD_RETURN_IF_ERROR(
      ops_.SiluBackward(activated_gradient_, saved.ffn_hidden, hidden_gradient, stream_));
  if (recompute == ActivationRecompute::kNone) {
    // norm2's output, recomputed (its rstd is rewritten with the very same values).
    FSDPD_RETURN_IF_ERROR(ops_.RmsNormForward(saved.middle, weight("norm2.weight"),
                                              config_.norm_eps, row_scratch_, saved.ffn_rstd,
                                              stream_));
  }
  FSDPD_RETURN_IF_ERROR(ops_.LinearBackward(hidden_gradient, row_scratch_, weight("ffn.0.weight"),
                                            normed_gradient_, gradient("ffn.0.weight"), no_bias,
                                            stream_));
  FSDPD_RETURN_IF_ERROR(ops_.RmsNormBackward(normed_gradient_, saved.middle, weight("norm2.weight"),
                                             saved.ffn_rstd, branch_gradient_,
                                             gradient("norm2.weight"), stream_));
  FSDPD_RETURN_IF_ERROR(
      ops_.Add(residual_gradient_, branch_gradient_, residual_gradient_, stream_));

  // Attention branch: middle = input + out_proj(attention(in_proj(norm1(input)))).
  FSDPD_RETURN_IF_ERROR(ops_.LinearBackward(
      residual_gradient_, saved.attention, weight("attn.out_proj.weight"), attention_gradient_,
      gradient("attn.out_proj.weight"), gradient("attn.out_proj.bias"), stream_));
  FSDPD_RETURN_IF_ERROR(ops_.AttentionBackward(attention_gradient_, saved.qkv, saved.attention,
                                               saved.lse, config_.heads, config_.causal,
                                               qkv_gradient_, stream_));
  FSDPD_RETURN_IF_ERROR(ops_.RmsNormForward(input, weight("norm1.weight"), config_.norm_eps,
                                            row_scratch_, saved.attention_rstd, stream_));
  FSDPD_RETURN_IF_ERROR(ops_.LinearBackward(
      qkv_gradient_, row_scratch_, weight("attn.in_proj_weight"), normed_gradient_,
      gradient("attn.in_proj_weight"), gradient("attn.in_proj_bias"), stream_));
  FSDPD_RETURN_IF_ERROR(ops_.RmsNormBackward(normed_gradient_, input, weight("norm1.weight"),
                                             saved.attention_rstd, branch_gradient_,
                                             gradient("norm1.weight"), stream_));
  FSDPD_RETURN_IF_ERROR(
      ops_.Add(residual_gradient_, branch_gradient_, residual_gradient_, stream_));
  --next_layer_;
  return absl::OkStatus();
}

absl::Status BackendMiniLLM::EmbedBackward(const Tensor& root_grads) {
  if (phase_ != Phase::kBackward || next_layer_ != -1) {
    return absl::FailedPreconditionError(
        "MiniLLM::EmbedBackward: HeadForwardBackward and every block's backward must run first");
  }
  FSDPD_RETURN_IF_ERROR(CheckUnitTensor(root_grads, root_unit(), "gradients"));
  FSDPD_RETURN_IF_ERROR(ops_.EmbeddingBackward(
      residual_gradient_, token_ids_, Parameter(root_grads, root_unit(), "embed.weight"), stream_));
  phase_ = Phase::kDone;
  return absl::OkStatus();
}

absl::Status BackendMiniLLM::RunForwardOnly(const std::vector<Tensor>& unit_params) {
  if (unit_params.size() != units_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("MiniLLM::Logits: expected parameters for ",
                                                   units_.size(), " units, got ",
                                                   unit_params.size()));
  }
  FSDPD_RETURN_IF_ERROR(EmbedForward(unit_params[static_cast<size_t>(root_unit())]));
  for (int layer = 0; layer < config_.layers; ++layer) {
    FSDPD_RETURN_IF_ERROR(BlockForward(layer, unit_params[static_cast<size_t>(layer)]));
  }
  return absl::OkStatus();
}

absl::Status BackendMiniLLM::Logits(const std::vector<Tensor>& unit_params,
                                    std::vector<float>* logits) {
  if (logits == nullptr) return absl::InvalidArgumentError("MiniLLM::Logits: no output vector");
  FSDPD_RETURN_IF_ERROR(RunForwardOnly(unit_params));
  const Tensor& root_params = unit_params[static_cast<size_t>(root_unit())];
  Tensor head_input;
  FSDPD_RETURN_IF_ERROR(FinalNormForward(root_params, &head_input));
  // The full [T, V] logits exist only here, for evaluation and tests.
  absl::StatusOr<Tensor> device_logits =
      NewTensor(backend_->activation_dtype(), {tokens_, config_.vocab});
  if (!device_logits.ok()) return device_logits.status();
  std::unique_ptr<Buffer> logits_buffer = std::move(buffers_.back());
  buffers_.pop_back();
  FSDPD_RETURN_IF_ERROR(ops_.LinearForward(head_input,
                                           Parameter(root_params, root_unit(), "head.weight"),
                                           Tensor{}, *device_logits, stream_));
  Tensor host_view = *device_logits;
  std::unique_ptr<Buffer> float_buffer;
  if (device_logits->dtype != DType::kF32) {
    absl::StatusOr<Tensor> converted = NewTensor(DType::kF32, device_logits->shape);
    if (!converted.ok()) return converted.status();
    float_buffer = std::move(buffers_.back());
    buffers_.pop_back();
    FSDPD_RETURN_IF_ERROR(ops_.Cast(*device_logits, *converted, stream_));
    host_view = *converted;
  }
  logits->resize(static_cast<size_t>(tokens_ * config_.vocab));
  FSDPD_RETURN_IF_ERROR(backend_->CopyToHost(host_view, logits->data(), stream_));
  FSDPD_RETURN_IF_ERROR(stream_.Synchronize());
  // The forward just run left no state for a backward.
  phase_ = Phase::kStepBegun;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<MiniLLM>> MiniLLM::Create(const ModelConfig& config, int64_t batch,
                                                         int64_t seq, Backend* backend) {
  if (backend == nullptr) return absl::InvalidArgumentError("MiniLLM::Create: no backend");
  if (batch <= 0 || seq <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("MiniLLM::Create: batch and seq must be positive, got ", batch, " and ", seq));
  }
  if (config.vocab <= 0 || config.dim <= 0 || config.layers <= 0 || config.heads <= 0 ||
      config.ffn_hidden <= 0 || config.dim % config.heads != 0 || !(config.norm_eps >= 0.0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MiniLLM::Create: invalid config (vocab ", config.vocab, ", dim ", config.dim, ", layers ",
        config.layers, ", heads ", config.heads, ", ffn_hidden ", config.ffn_hidden, ", norm_eps ",
        config.norm_eps, "): sizes must be positive and dim divisible by heads"));
  }
  auto model = std::make_unique<BackendMiniLLM>(config, batch, seq, backend);
  FSDPD_RETURN_IF_ERROR(model->AllocateWorkspace());
  return std::unique_ptr<MiniLLM>(std::move(model));
}

}  // namespace fsdpd
