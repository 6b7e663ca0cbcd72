#include "edge/model.h"

#include <cstdlib>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "edge/quantize.h"
#include "formats/safetensors.h"

namespace fsdpd::edge {
namespace {

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

}  // namespace

const std::vector<float>& HostModel::Tensor(const std::string& name) const {
  for (const auto& [tensor_name, values] : tensors) {
    if (tensor_name == name) return values;
  }
  std::abort();  // LoadHostModel checked every name
}

absl::StatusOr<HostModel> LoadHostModel(const std::string& path) {
  std::map<std::string, std::string> metadata;
  absl::StatusOr<std::vector<NamedTensor>> tensors = ReadSafetensors(path, &metadata);
  if (!tensors.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read the model ", path, ": ", tensors.status().message()));
  }
  HostModel model;
  model.path = path;
  FSDPD_ASSIGN_OR_RETURN(model.config, ParseModelMetadata(metadata, path));
  std::map<std::string, NamedTensor*> by_name;
  for (NamedTensor& tensor : *tensors) by_name[tensor.name] = &tensor;
  std::vector<std::string> problems;
  std::set<std::string> known;
  for (const ExportedTensorShape& expected : ExportedModelTensors(model.config)) {
    known.insert(expected.name);
    auto found = by_name.find(expected.name);
    if (found == by_name.end()) {
      problems.push_back(absl::StrCat("tensor ", expected.name, " is missing"));
    } else if (found->second->shape != expected.shape) {
      problems.push_back(absl::StrCat("tensor ", expected.name, " is ",
                                      ShapeText(found->second->shape), ", the config needs ",
                                      ShapeText(expected.shape)));
    } else {
      model.tensors.emplace_back(expected.name, std::move(found->second->values));
    }
  }
  for (const auto& [name, tensor] : by_name) {
    if (known.count(name) == 0) problems.push_back(absl::StrCat("unexpected tensor ", name));
  }
  if (!problems.empty()) {
    const size_t shown = std::min<size_t>(problems.size(), 4);
    return absl::InvalidArgumentError(absl::StrCat(
        path, " does not match its config metadata: ",
        absl::StrJoin(problems.begin(), problems.begin() + shown, "; "),
        problems.size() > shown ? absl::StrCat(" and ", problems.size() - shown, " more") : ""));
  }
  return model;
}

absl::StatusOr<std::unique_ptr<ModelRunner>> ModelRunner::Create(const HostModel& model,
                                                                 Backend* backend, int64_t batch,
                                                                 int64_t seq,
                                                                 WeightFormat weights) {
  if (batch <= 0 || seq <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch and seq must be positive (got ", batch, " and ", seq, ")"));
  }
  std::unique_ptr<ModelRunner> runner(new ModelRunner(model.config, backend, batch, seq));
  const ExportedModelConfig& c = model.config;
  auto placed = [&](absl::StatusOr<std::unique_ptr<Buffer>> buffer)
      -> absl::StatusOr<std::unique_ptr<Buffer>> {
    if (buffer.ok()) runner->weight_bytes_ += backend->Bytes(**buffer);
    return buffer;
  };
  auto weight = [&](const std::string& name) -> absl::StatusOr<std::unique_ptr<Buffer>> {
    const std::vector<float>& values = model.Tensor(name);
    return placed(backend->Weight(values.data(), static_cast<int64_t>(values.size())));
  };
  // A linear layer's weight [rows, cols]: int8 where asked for, quantized here.
  auto linear = [&](const std::string& name, int64_t rows,
                    int64_t cols) -> absl::StatusOr<std::unique_ptr<Buffer>> {
    if (weights != WeightFormat::kInt8) return weight(name);
    FSDPD_ASSIGN_OR_RETURN(const Int8Tensor tensor,
                           QuantizeInt8(name, model.Tensor(name).data(), rows, cols));
    return placed(backend->Int8Weight(tensor));
  };
  const int64_t ffn_features = c.ffn_mult * c.dim;
  FSDPD_ASSIGN_OR_RETURN(runner->embed_, weight("embed.weight"));
  FSDPD_ASSIGN_OR_RETURN(runner->head_, linear("head.weight", c.vocab, c.dim));
  if (c.final_norm) {
    FSDPD_ASSIGN_OR_RETURN(runner->final_norm_, weight("norm.weight"));
  }
  for (int64_t index = 0; index < c.layers; ++index) {
    const std::string prefix = absl::StrCat("layers.", index, ".");
    Layer layer;
    FSDPD_ASSIGN_OR_RETURN(layer.norm1, weight(prefix + "norm1.weight"));
    FSDPD_ASSIGN_OR_RETURN(layer.in_proj_weight,
                           linear(prefix + "attn.in_proj_weight", 3 * c.dim, c.dim));
    FSDPD_ASSIGN_OR_RETURN(layer.in_proj_bias, weight(prefix + "attn.in_proj_bias"));
    FSDPD_ASSIGN_OR_RETURN(layer.out_proj_weight,
                           linear(prefix + "attn.out_proj.weight", c.dim, c.dim));
    FSDPD_ASSIGN_OR_RETURN(layer.out_proj_bias, weight(prefix + "attn.out_proj.bias"));
    FSDPD_ASSIGN_OR_RETURN(layer.norm2, weight(prefix + "norm2.weight"));
    FSDPD_ASSIGN_OR_RETURN(layer.ffn0, linear(prefix + "ffn.0.weight", ffn_features, c.dim));
    FSDPD_ASSIGN_OR_RETURN(layer.ffn2, linear(prefix + "ffn.2.weight", c.dim, ffn_features));
    runner->layers_.push_back(std::move(layer));
  }
  const int64_t rows = batch * seq;
  const int64_t ffn = ffn_features;
  // The window's activations below, at 4 bytes an element (fp16 ones take less), asked for at
  // once: a window far too large is refused before any of it is allocated.
  const double elements =
      static_cast<double>(rows) * (2.0 + 4.0 * c.dim + 3.0 * c.dim + 2.0 * ffn + c.vocab + 1.0);
  FSDPD_RETURN_IF_ERROR(backend->CheckRoom(4.0 * elements));
  FSDPD_ASSIGN_OR_RETURN(runner->tokens_, backend->Ints(rows));
  FSDPD_ASSIGN_OR_RETURN(runner->targets_, backend->Ints(rows));
  FSDPD_ASSIGN_OR_RETURN(runner->hidden_, backend->Floats(rows * c.dim));
  // Read only as a projection's x: fp16 where the backend's matmul reads fp16 (backend.h).
  FSDPD_ASSIGN_OR_RETURN(runner->normed_, backend->MatmulInput(rows * c.dim));
  FSDPD_ASSIGN_OR_RETURN(runner->qkv_, backend->Floats(rows * 3 * c.dim));
  FSDPD_ASSIGN_OR_RETURN(runner->attention_, backend->Floats(rows * c.dim));
  FSDPD_ASSIGN_OR_RETURN(runner->projected_, backend->Floats(rows * c.dim));
  FSDPD_ASSIGN_OR_RETURN(runner->ffn_hidden_, backend->Floats(rows * ffn));
  FSDPD_ASSIGN_OR_RETURN(runner->activated_, backend->MatmulInput(rows * ffn));
  FSDPD_ASSIGN_OR_RETURN(runner->logits_, backend->Floats(rows * c.vocab));
  FSDPD_ASSIGN_OR_RETURN(runner->nll_, backend->Floats(rows));
  FSDPD_RETURN_IF_ERROR(backend->Finish());
  return runner;
}

absl::Status ModelRunner::CheckTokens(const int32_t* tokens, int64_t count) const {
  for (int64_t t = 0; t < count; ++t) {
    if (tokens[t] < 0 || tokens[t] >= config_.vocab) {
      return absl::InvalidArgumentError(absl::StrCat("token ", tokens[t], " at position ", t,
                                                     " is outside the model's vocab of ",
                                                     config_.vocab));
    }
  }
  return absl::OkStatus();
}

absl::Status ModelRunner::Layers(int64_t rows,
                                 const std::function<absl::Status(Layer&, size_t)>& attend) {
  const int64_t dim = config_.dim;
  const int64_t ffn = config_.ffn_mult * dim;
  Backend& b = *backend_;
  const bool fused = b.FusesIntoLinear(rows);
  for (size_t index = 0; index < layers_.size(); ++index) {
    Layer& layer = layers_[index];
    // Folded into the qkv projection where fused (Qkv).
    if (!fused) {
      FSDPD_RETURN_IF_ERROR(
          b.RmsNorm(*hidden_, *layer.norm1, rows, dim, config_.norm_eps, *normed_));
    }
    FSDPD_RETURN_IF_ERROR(attend(layer, index));
    FSDPD_RETURN_IF_ERROR(
        AddToHidden(*attention_, *layer.out_proj_weight, layer.out_proj_bias.get(), rows, dim));
    if (fused) {
      // RMSNorm, ffn.0 and SiLU in one op; ffn.2 and the residual add in another.
      LinearFusion norm_silu;
      norm_silu.norm = layer.norm2.get();
      norm_silu.eps = config_.norm_eps;
      norm_silu.silu = true;
      FSDPD_RETURN_IF_ERROR(
          b.FusedLinear(*hidden_, *layer.ffn0, nullptr, rows, dim, ffn, *ffn_hidden_, norm_silu));
      FSDPD_RETURN_IF_ERROR(AddToHidden(*ffn_hidden_, *layer.ffn2, nullptr, rows, ffn));
      continue;
    }
    FSDPD_RETURN_IF_ERROR(b.RmsNorm(*hidden_, *layer.norm2, rows, dim, config_.norm_eps, *normed_));
    FSDPD_RETURN_IF_ERROR(b.Linear(*normed_, *layer.ffn0, nullptr, rows, dim, ffn, *ffn_hidden_));
    FSDPD_RETURN_IF_ERROR(b.Silu(*ffn_hidden_, rows * ffn, *activated_));
    FSDPD_RETURN_IF_ERROR(AddToHidden(*activated_, *layer.ffn2, nullptr, rows, ffn));
  }
  return absl::OkStatus();
}

absl::Status ModelRunner::Qkv(Layer& layer, int64_t rows, Buffer& out, int64_t out_offset) {
  Backend& b = *backend_;
  const int64_t dim = config_.dim;
  if (b.FusesIntoLinear(rows)) {
    LinearFusion norm;
    norm.norm = layer.norm1.get();
    norm.eps = config_.norm_eps;
    norm.out_offset = out_offset;
    return b.FusedLinear(*hidden_, *layer.in_proj_weight, layer.in_proj_bias.get(), rows, dim,
                         3 * dim, out, norm);
  }
  if (out_offset == 0) {
    return b.Linear(*normed_, *layer.in_proj_weight, layer.in_proj_bias.get(), rows, dim, 3 * dim,
                    out);
  }
  FSDPD_RETURN_IF_ERROR(b.Linear(*normed_, *layer.in_proj_weight, layer.in_proj_bias.get(), rows,
                                 dim, 3 * dim, *qkv_));
  return b.CopyFloats(*qkv_, 0, out, out_offset, rows * 3 * dim);
}

absl::Status ModelRunner::AddToHidden(Buffer& x, Buffer& weight, Buffer* bias, int64_t rows,
                                      int64_t in_features) {
  Backend& b = *backend_;
  const int64_t dim = config_.dim;
  if (b.FusesIntoLinear(rows))
    return b.LinearAdd(x, weight, bias, rows, in_features, dim, *hidden_);
  FSDPD_RETURN_IF_ERROR(b.Linear(x, weight, bias, rows, in_features, dim, *projected_));
  return b.Add(*hidden_, *projected_, rows * dim, *hidden_);
}

absl::Status ModelRunner::Forward(const std::vector<int32_t>& tokens) {
  const int64_t rows = batch_ * seq_;
  if (static_cast<int64_t>(tokens.size()) != rows) {
    return absl::InvalidArgumentError(absl::StrCat("expected ", rows, " tokens (batch ", batch_,
                                                   " × seq ", seq_, "), got ", tokens.size()));
  }
  FSDPD_RETURN_IF_ERROR(CheckTokens(tokens.data(), rows));
  const int64_t dim = config_.dim;
  Backend& b = *backend_;
  FSDPD_RETURN_IF_ERROR(b.WriteInts(*tokens_, tokens.data(), rows));
  FSDPD_RETURN_IF_ERROR(b.Embedding(*embed_, *tokens_, rows, dim, *hidden_));
  FSDPD_RETURN_IF_ERROR(Layers(rows, [&](Layer& layer, size_t) -> absl::Status {
    FSDPD_RETURN_IF_ERROR(Qkv(layer, rows, *qkv_, 0));
    return b.Attention(*qkv_, batch_, seq_, config_.heads, dim, config_.causal, *attention_);
  }));
  return Head(*hidden_, rows);
}

absl::Status ModelRunner::Head(Buffer& input, int64_t rows) {
  const int64_t dim = config_.dim;
  Backend& b = *backend_;
  Buffer* head_input = &input;
  if (final_norm_ != nullptr && b.FusesIntoLinear(rows)) {
    LinearFusion norm;
    norm.norm = final_norm_.get();
    norm.eps = config_.norm_eps;
    return b.FusedLinear(input, *head_, nullptr, rows, dim, config_.vocab, *logits_, norm);
  }
  if (final_norm_ != nullptr) {
    FSDPD_RETURN_IF_ERROR(b.RmsNorm(input, *final_norm_, rows, dim, config_.norm_eps, *normed_));
    head_input = normed_.get();
  }
  return b.Linear(*head_input, *head_, nullptr, rows, dim, config_.vocab, *logits_);
}

absl::Status ModelRunner::Prefill(const std::vector<int32_t>& tokens, std::vector<float>* logits) {
  const int64_t count = static_cast<int64_t>(tokens.size());
  if (!config_.causal) {
    return absl::FailedPreconditionError(
        "decoding with a cache needs a causal model: every position of this one attends to the "
        "later ones too");
  }
  if (batch_ != 1) return absl::InternalError("decoding needs a runner of batch 1");
  if (count < 1 || count > seq_) {
    return absl::InvalidArgumentError(
        absl::StrCat("prefill takes 1 to seq (", seq_, ") tokens, got ", count));
  }
  FSDPD_RETURN_IF_ERROR(CheckTokens(tokens.data(), count));
  cached_ = 0;  // a failure below leaves no stale positions behind
  if (cache_.empty()) {
    const double cache_floats =
        static_cast<double>(layers_.size()) * static_cast<double>(seq_) * 3.0 * config_.dim;
    FSDPD_RETURN_IF_ERROR(backend_->CheckRoom(4.0 * (cache_floats + config_.dim)));
    // Kept only whole: a failed allocation leaves no cache to half-use at the next prefill.
    std::vector<std::unique_ptr<Buffer>> cache;
    for (size_t index = 0; index < layers_.size(); ++index) {
      FSDPD_ASSIGN_OR_RETURN(std::unique_ptr<Buffer> rows,
                             backend_->Floats(seq_ * 3 * config_.dim));
      cache.push_back(std::move(rows));
    }
    FSDPD_ASSIGN_OR_RETURN(newest_, backend_->Floats(config_.dim));
    cache_ = std::move(cache);
  }
  FSDPD_RETURN_IF_ERROR(Decode(tokens.data(), 0, count, logits));
  cached_ = count;
  return absl::OkStatus();
}

absl::Status ModelRunner::Append(int32_t token, std::vector<float>* logits) {
  if (cached_ == 0) return absl::FailedPreconditionError("append before prefill: no sequence");
  if (cached_ >= seq_) {
    return absl::FailedPreconditionError(
        absl::StrCat("the cache holds seq (", seq_, ") positions; prefill a window to go on"));
  }
  // A refused token leaves the sequence as it was; a failure on the device ends it.
  FSDPD_RETURN_IF_ERROR(CheckTokens(&token, 1));
  const int64_t first = cached_;
  cached_ = 0;
  FSDPD_RETURN_IF_ERROR(Decode(&token, first, 1, logits));
  cached_ = first + 1;
  return absl::OkStatus();
}

absl::Status ModelRunner::AppendGreedy(int32_t token, int64_t count, std::vector<int32_t>* picked) {
  if (cached_ == 0) return absl::FailedPreconditionError("append before prefill: no sequence");
  if (count < 1 || count > kGreedySteps) {
    return absl::InvalidArgumentError(
        absl::StrCat("greedy steps come 1 to ", kGreedySteps, " at a time, not ", count));
  }
  if (cached_ + count > seq_) {
    return absl::FailedPreconditionError(absl::StrCat("the cache holds ", cached_, " of seq (",
                                                      seq_, ") positions: no room for ", count,
                                                      " more; prefill a window to go on"));
  }
  FSDPD_RETURN_IF_ERROR(CheckTokens(&token, 1));
  if (picks_ == nullptr) {
    FSDPD_ASSIGN_OR_RETURN(picks_, backend_->Ints(kGreedySteps));
  }
  const int64_t first = cached_;
  cached_ = 0;  // a failure below ends the sequence
  FSDPD_RETURN_IF_ERROR(backend_->WriteInts(*tokens_, &token, 1));
  for (int64_t step = 0; step < count; ++step) {
    FSDPD_RETURN_IF_ERROR(DecodeOnDevice(first + step, 1));
    // The pick is the next step's input (tokens_[0]) without a round trip through the host.
    FSDPD_RETURN_IF_ERROR(backend_->Argmax(*logits_, config_.vocab, *tokens_, *picks_, step));
  }
  picked->resize(static_cast<size_t>(count));
  FSDPD_RETURN_IF_ERROR(backend_->ReadInts(*picks_, picked->data(), count));
  cached_ = first + count;
  return absl::OkStatus();
}

absl::Status ModelRunner::Decode(const int32_t* tokens, int64_t first, int64_t rows,
                                 std::vector<float>* logits) {
  FSDPD_RETURN_IF_ERROR(backend_->WriteInts(*tokens_, tokens, rows));
  FSDPD_RETURN_IF_ERROR(DecodeOnDevice(first, rows));
  // ReadFloats waits for the work before it; a Finish of its own here would be a second submit
  // and wait a token where the logits are read through staging.
  logits->resize(static_cast<size_t>(config_.vocab));
  return backend_->ReadFloats(*logits_, logits->data(), config_.vocab);
}

absl::Status ModelRunner::DecodeOnDevice(int64_t first, int64_t rows) {
  const int64_t dim = config_.dim;
  Backend& b = *backend_;
  FSDPD_RETURN_IF_ERROR(b.Embedding(*embed_, *tokens_, rows, dim, *hidden_));
  FSDPD_RETURN_IF_ERROR(Layers(rows, [&](Layer& layer, size_t index) -> absl::Status {
    // The new qkv rows go straight into the cache, after the cached ones.
    Buffer& cache = *cache_[index];
    FSDPD_RETURN_IF_ERROR(Qkv(layer, rows, cache, first * 3 * dim));
    // A new sequence takes the attention the forward takes (the same tuned shaders).
    if (first == 0) return b.Attention(cache, 1, rows, config_.heads, dim, true, *attention_);
    return b.CausalAttentionAt(cache, first, rows, config_.heads, dim, *attention_);
  }));
  // The head reads the newest row: hidden_ itself when it is the only one.
  Buffer* newest = hidden_.get();
  if (rows > 1) {
    FSDPD_RETURN_IF_ERROR(b.CopyFloats(*hidden_, (rows - 1) * dim, *newest_, 0, dim));
    newest = newest_.get();
  }
  return Head(*newest, 1);
}

absl::Status ModelRunner::Logits(const std::vector<int32_t>& tokens, std::vector<float>* logits) {
  FSDPD_RETURN_IF_ERROR(Forward(tokens));
  logits->resize(static_cast<size_t>(batch_ * seq_ * config_.vocab));
  return backend_->ReadFloats(*logits_, logits->data(), static_cast<int64_t>(logits->size()));
}

absl::StatusOr<double> ModelRunner::SumNll(const std::vector<int32_t>& tokens,
                                           const std::vector<int32_t>& targets) {
  const int64_t rows = batch_ * seq_;
  if (static_cast<int64_t>(targets.size()) != rows) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected ", rows, " targets, got ", targets.size()));
  }
  FSDPD_RETURN_IF_ERROR(CheckTokens(targets.data(), rows));
  FSDPD_RETURN_IF_ERROR(backend_->WriteInts(*targets_, targets.data(), rows));
  FSDPD_RETURN_IF_ERROR(Forward(tokens));
  FSDPD_RETURN_IF_ERROR(backend_->TokenNll(*logits_, *targets_, rows, config_.vocab, *nll_));
  std::vector<float> nll(static_cast<size_t>(rows));
  FSDPD_RETURN_IF_ERROR(backend_->ReadFloats(*nll_, nll.data(), rows));
  double sum = 0.0;
  for (float value : nll) sum += value;
  return sum;
}

}  // namespace fsdpd::edge
