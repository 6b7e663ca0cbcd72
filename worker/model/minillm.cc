// MiniLLM: its workspace, forward and evaluation logits, and Create.
#include "worker/model/minillm.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "worker/model/minillm_backend.h"

namespace fsdpd {
namespace minillm_internal {

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
  // The FFN's first product: [T, F], or llama's gate and up [T, 2F].
  const std::vector<int64_t> rows_by_ffn_in = {tokens_, config_.ffn_in_width()};
  const std::vector<int64_t> sequence_by_dim = {batch_, seq_, dim};
  const std::vector<int64_t> sequence_by_qkv = {batch_, seq_, config_.qkv_width()};
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
  if (recompute != ActivationRecompute::kNone) FSDPD_NEW(shared_hidden, act, rows_by_ffn_in);
  for (BlockActivations& block : blocks_) {
    FSDPD_NEW(block.attention_rstd, DType::kF32, (std::vector<int64_t>{tokens_}));
    FSDPD_NEW(block.qkv, act, sequence_by_qkv);
    FSDPD_NEW(block.attention, act, sequence_by_dim);
    FSDPD_NEW(block.lse, DType::kF32, (std::vector<int64_t>{batch_, config_.heads, seq_}));
    FSDPD_NEW(block.middle, act, rows_by_dim);
    FSDPD_NEW(block.ffn_rstd, DType::kF32, (std::vector<int64_t>{tokens_}));
    if (recompute == ActivationRecompute::kNone) {
      FSDPD_NEW(block.ffn_hidden, act, rows_by_ffn_in);
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
  FSDPD_NEW(activated_, act, rows_by_hidden);
  // The gradient at silu's output (then, in place, at its input) and the attention branch's
  // gradients are never alive at once (a block's backward is done with the FFN branch before the
  // attention branch starts): one buffer holds either, [T, F] or [T, D] followed by [T, 3D]
  // (llama: [T, qkv_width]; its SwiGLU gradient at gate and up goes over the saved gate and up).
  Tensor branch_gradients;
  FSDPD_NEW(
      branch_gradients, act,
      (std::vector<int64_t>{std::max(tokens_ * hidden, tokens_ * (dim + config_.qkv_width()))}));
  auto view = [&](std::vector<int64_t> shape, int64_t element_offset) {
    return Tensor{static_cast<char*>(branch_gradients.data) + element_offset * DTypeSize(act), act,
                  std::move(shape)};
  };
  activated_gradient_ = view(rows_by_hidden, 0);
  attention_gradient_ = view(sequence_by_dim, 0);
  qkv_gradient_ = view(sequence_by_qkv, tokens_ * dim);
  FSDPD_NEW(row_scratch_, act, rows_by_dim);
  // FSDPD_FP8_AMAX=separate has every FP8 linear layer measure its operands itself, for
  // comparison (docs/operations.md, "GPU engine variables"). A value it does not know fails
  // every model, FP8 or not, as the other engine variables do.
  const char* amax_mode = std::getenv("FSDPD_FP8_AMAX");
  const std::string mode = amax_mode != nullptr ? amax_mode : "fused";
  if (mode != "fused" && mode != "separate") {
    return absl::InvalidArgumentError(
        absl::StrCat("FSDPD_FP8_AMAX must be fused or separate, got \"", mode, "\""));
  }
  if (config_.matmul_dtype == MatmulDtype::kFp8 && mode == "fused") {
    FSDPD_NEW(fp8_amax_, DType::kF32, (std::vector<int64_t>{kAmaxSlots}));
  }
#undef FSDPD_NEW
  return absl::OkStatus();
}

Tensor BackendMiniLLM::Amax(AmaxSlot slot) const {
  if (fp8_amax_.data == nullptr) return Tensor{};
  return Tensor{fp8_amax_.as<float>() + slot, DType::kF32, {1}};
}

AmaxSlot BackendMiniLLM::ResidualSlot(int layer) {
  return (layer & 1) == 0 ? kResidualEven : kResidualOdd;
}

Tensor BackendMiniLLM::ResidualAmax(int layer) const { return Amax(ResidualSlot(layer)); }

Tensor BackendMiniLLM::IncomingResidualAmax(int layer) const {
  if (layer == config_.layers - 1 && !config_.final_norm) return Tensor{};
  return ResidualAmax(layer);
}

absl::Status BackendMiniLLM::ZeroAmaxes(AmaxSlot first, int count) {
  if (fp8_amax_.data == nullptr) return absl::OkStatus();
  return ops_.Fill(Tensor{fp8_amax_.as<float>() + first, DType::kF32, {count}}, 0.0f, stream_);
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

Tensor BackendMiniLLM::Matrix(const Tensor& flat, int unit_index, const std::string& name,
                              int64_t rows) const {
  Tensor matrix = Parameter(flat, unit_index, name);
  matrix.shape = {rows, config_.dim};
  return matrix;
}

Tensor BackendMiniLLM::Optional(const Tensor& flat, int unit_index, const std::string& name) const {
  return name.empty() ? Tensor{} : Parameter(flat, unit_index, name);
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
  loss_queued_ = false;
  return absl::OkStatus();
}

absl::Status BackendMiniLLM::EmbedForward(const Tensor& root_params) {
  if (phase_ == Phase::kIdle) {
    return absl::FailedPreconditionError("MiniLLM::EmbedForward: BeginStep was not called");
  }
  FSDPD_RETURN_IF_ERROR(CheckUnitTensor(root_params, root_unit(), "parameters"));
  FSDPD_RETURN_IF_ERROR(
      ops_.EmbeddingForward(Parameter(root_params, root_unit(), root_names_.embedding), token_ids_,
                            residuals_[0], stream_));
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
  const BlockActivations& saved = Saved(layer);
  const Tensor no_bias;
  if (config_.llama()) {
    FSDPD_RETURN_IF_ERROR(ops_.SwigluForward(saved.ffn_hidden, activated_, stream_));
  } else {
    FSDPD_RETURN_IF_ERROR(ops_.SiluForward(saved.ffn_hidden, activated_, Amax(kFfnOutX), stream_));
  }
  FSDPD_RETURN_IF_ERROR(
      BlockLinearForward(activated_, Parameter(block_params, layer, BlockParameters(layer).ffn_out),
                         no_bias, row_scratch_, {config_.llama() ? Tensor{} : Amax(kFfnOutX)}));
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
  const BlockParameterNames names = BlockParameters(layer);
  auto weight = [&](const std::string& name) { return Parameter(block_params, layer, name); };
  auto bias = [&](const std::string& name) { return Optional(block_params, layer, name); };
  BlockActivations& saved = Saved(layer);
  const Tensor& input = residuals_[static_cast<size_t>(layer)];
  forwarded_layer_ = layer;
  // The five middle slots; the residual gradient's two are backward's (AmaxSlot).
  FSDPD_RETURN_IF_ERROR(ZeroAmaxes(kQkvX, kResidualOdd - kQkvX));

  FSDPD_RETURN_IF_ERROR(ops_.RmsNormForward(input, weight(names.attention_norm), config_.norm_eps,
                                            row_scratch_, saved.attention_rstd, Amax(kQkvX),
                                            stream_));
  FSDPD_RETURN_IF_ERROR(
      BlockLinearForward(row_scratch_, Matrix(block_params, layer, names.qkv, config_.qkv_width()),
                         bias(names.qkv_bias), saved.qkv, {Amax(kQkvX)}));
  if (config_.llama()) {
    FSDPD_RETURN_IF_ERROR(ops_.Rotary(saved.qkv, config_.heads, config_.kv_heads,
                                      config_.rope_theta, /*inverse=*/false, stream_));
  }
  FSDPD_RETURN_IF_ERROR(ops_.AttentionForward(saved.qkv, config_.heads,
                                              config_.attention_kv_heads(), config_.causal,
                                              saved.attention, saved.lse, stream_));
  FSDPD_RETURN_IF_ERROR(
      BlockLinearForward(saved.attention, weight(names.out), bias(names.out_bias), row_scratch_));
  FSDPD_RETURN_IF_ERROR(ops_.Add(input, row_scratch_, saved.middle, stream_));

  FSDPD_RETURN_IF_ERROR(ops_.RmsNormForward(saved.middle, weight(names.ffn_norm), config_.norm_eps,
                                            row_scratch_, saved.ffn_rstd, Amax(kFfnInX), stream_));
  const Tensor no_bias;
  return BlockLinearForward(row_scratch_,
                            Matrix(block_params, layer, names.ffn_in, config_.ffn_in_width()),
                            no_bias, saved.ffn_hidden, {Amax(kFfnInX)});
}

absl::Status BackendMiniLLM::BlockLinearForward(const Tensor& x, const Tensor& weight,
                                                const Tensor& bias, const Tensor& out,
                                                const Fp8OperandAmax& amax) {
  if (config_.matmul_dtype == MatmulDtype::kFp8) {
    return ops_.Fp8LinearForward(x, weight, bias, out, amax, stream_);
  }
  return ops_.LinearForward(x, weight, bias, out, stream_);
}

absl::Status BackendMiniLLM::BlockLinearBackward(const Tensor& dout, const Tensor& x,
                                                 const Tensor& weight, const Tensor& dx,
                                                 const Tensor& dweight, const Tensor& dbias,
                                                 Write grad_write, const Fp8OperandAmax& amax) {
  if (config_.matmul_dtype == MatmulDtype::kFp8) {
    return ops_.Fp8LinearBackward(dout, x, weight, dx, dweight, dbias, grad_write, amax, stream_);
  }
  return ops_.LinearBackward(dout, x, weight, dx, dweight, dbias, grad_write, stream_);
}

absl::Status BackendMiniLLM::FinalNormForward(const Tensor& root_params, Tensor* head_input) {
  const Tensor& last = residuals_.back();
  if (!config_.final_norm) {
    *head_input = last;
    return absl::OkStatus();
  }
  FSDPD_RETURN_IF_ERROR(ops_.RmsNormForward(last,
                                            Parameter(root_params, root_unit(), root_names_.norm),
                                            config_.norm_eps, final_normed_, final_rstd_,
                                            /*out_amax=*/Tensor{}, stream_));
  *head_input = final_normed_;
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
                                           Parameter(root_params, root_unit(), root_names_.head),
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

}  // namespace minillm_internal

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
  if (config.llama() &&
      (config.kv_heads <= 0 || config.heads % config.kv_heads != 0 || config.head_dim() % 2 != 0 ||
       !(config.rope_theta > 0.0) || !config.causal || !config.final_norm)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MiniLLM::Create: invalid llama config (heads ", config.heads, ", kv_heads ",
        config.kv_heads, ", head_dim ", config.head_dim(), ", rope_theta ", config.rope_theta,
        "): it needs kv_heads dividing heads, an even head_dim, a positive rope_theta, causal "
        "attention and a final norm"));
  }
  auto model = std::make_unique<minillm_internal::BackendMiniLLM>(config, batch, seq, backend);
  FSDPD_RETURN_IF_ERROR(model->AllocateWorkspace());
  return std::unique_ptr<MiniLLM>(std::move(model));
}

}  // namespace fsdpd
