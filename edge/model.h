// An exported fsdpd model (MiniLLM, docs/architecture.md) read for inference: the config
// from the safetensors __metadata__ (formats/model_metadata.h) and every tensor checked by
// name and shape against it, then placed on a backend.
//
// Forward, as the training engine computes it (worker/model/minillm.cc):
//   h = embed.weight[tokens]
//   per layer:  m = h + out_proj(attention(in_proj(rmsnorm1(h))))
//               h = m + ffn.2(silu(ffn.0(rmsnorm2(m))))
//   logits = head.weight · (final_norm ? rmsnorm(h) : h)      (head untied from embed)
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "edge/backend.h"
#include "formats/model_metadata.h"

namespace fsdpd::edge {

// Host copy of the file: config and fp32 tensors in PyTorch's names.
struct HostModel {
  std::string path;
  ExportedModelConfig config;
  std::vector<std::pair<std::string, std::vector<float>>> tensors;  // in load order
  const std::vector<float>& Tensor(const std::string& name) const;  // aborts when absent
};

// Reads and checks `path`: no config metadata, a missing, extra or misshapen tensor are
// INVALID_ARGUMENT naming the file and tensor.
absl::StatusOr<HostModel> LoadHostModel(const std::string& path);

// How the weights are placed. kAuto: as the backend stores weights (fp16 or fp32). kInt8: the
// linear layers' weights (every layer's in_proj, out_proj, ffn.0 and ffn.2) and the head are
// quantized to int8 on the host (edge/quantize.h) and placed so (Backend::Int8Weight); the
// embedding table, norms and biases stay as kAuto places them (docs/edge.md, "int8 weights").
enum class WeightFormat { kAuto, kInt8 };

// The model's weights on a backend, with the activations for batch × seq tokens.
class ModelRunner {
 public:
  static absl::StatusOr<std::unique_ptr<ModelRunner>> Create(
      const HostModel& model, Backend* backend, int64_t batch, int64_t seq,
      WeightFormat weights = WeightFormat::kAuto);

  const ExportedModelConfig& config() const { return config_; }
  int64_t batch() const { return batch_; }
  int64_t seq() const { return seq_; }
  // The bytes the weights take on the backend (Backend::Bytes of each).
  int64_t weight_bytes() const { return weight_bytes_; }

  // tokens[batch·seq] (checked against vocab) → logits[batch·seq, vocab] on the host.
  absl::Status Logits(const std::vector<int32_t>& tokens, std::vector<float>* logits);
  // Σ over batch·seq of −log p(target | prefix): the sum of token NLLs, and forward only on
  // the device (the logits stay there).
  absl::StatusOr<double> SumNll(const std::vector<int32_t>& tokens,
                                const std::vector<int32_t>& targets);

  // Decoding with a cache of every layer's qkv rows, for causal models on a runner of batch 1.
  // Prefill starts a sequence: positions [0, n) from n ≤ seq tokens. Append adds one position
  // (while the cache holds fewer than seq), each token attending to the cached ones. Both give
  // the logits of the newest position (vocab floats). The cache takes layers × seq × 3·dim
  // floats on the backend, allocated by the first Prefill.
  absl::Status Prefill(const std::vector<int32_t>& tokens, std::vector<float>* logits);
  absl::Status Append(int32_t token, std::vector<float>* logits);
  // Greedy decoding with no wait for the host between tokens: `count` positions after the
  // cached ones, the first from `token`, each next one the pick (edge/argmax.h) of the one
  // before, which stays on the device as the next step's input (Backend::Argmax). The count
  // picks come back together in *picked, the last of them not yet in the cache: what Append
  // and a host pick would give, count times, with one wait instead of count. 1 ≤ count ≤
  // kGreedySteps, and the cache must have room for all of them.
  static constexpr int64_t kGreedySteps = 16;
  absl::Status AppendGreedy(int32_t token, int64_t count, std::vector<int32_t>* picked);
  int64_t cached() const { return cached_; }  // positions in the cache

 private:
  struct Layer {
    std::unique_ptr<Buffer> norm1, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias,
        norm2, ffn0, ffn2;
  };
  ModelRunner(ExportedModelConfig config, Backend* backend, int64_t batch, int64_t seq)
      : config_(config), backend_(backend), batch_(batch), seq_(seq) {}
  absl::Status Forward(const std::vector<int32_t>& tokens);
  absl::Status CheckTokens(const int32_t* tokens, int64_t count) const;
  // Every layer over the `rows` rows in hidden_; `attend` leaves attention_ from the layer's
  // qkv (Qkv). Where the backend folds ops into Linear (Backend::FusesIntoLinear) each norm goes
  // into the projection after it and the SiLU into ffn.0.
  absl::Status Layers(int64_t rows, const std::function<absl::Status(Layer&, size_t)>& attend);
  // The layer's qkv of the `rows` rows, RmsNorm(hidden_) · in_projᵀ (+ bias), into `out` from
  // float out_offset on: one FusedLinear, or the Linear of normed_ (which Layers wrote) and,
  // where out_offset is not 0, a copy through qkv_.
  absl::Status Qkv(Layer& layer, int64_t rows, Buffer& out, int64_t out_offset);
  // hidden_ += x · weightᵀ (+ bias) over `rows` rows: the residual add folded into the product
  // where the backend can (Backend::FusesIntoLinear), else through projected_.
  absl::Status AddToHidden(Buffer& x, Buffer& weight, Buffer* bias, int64_t rows,
                           int64_t in_features);
  // The final norm (where the model has one) and the head over `rows` rows of `input`, into
  // logits_.
  absl::Status Head(Buffer& input, int64_t rows);
  // `rows` new positions from `first` on, through the cache; the newest one's logits.
  absl::Status Decode(const int32_t* tokens, int64_t first, int64_t rows,
                      std::vector<float>* logits);
  // Decode's work from the ids already in tokens_, leaving the logits in logits_.
  absl::Status DecodeOnDevice(int64_t first, int64_t rows);

  ExportedModelConfig config_;
  Backend* backend_;
  int64_t batch_;
  int64_t seq_;
  std::unique_ptr<Buffer> embed_, head_, final_norm_;
  std::vector<Layer> layers_;
  std::unique_ptr<Buffer> tokens_, targets_, hidden_, normed_, qkv_, attention_, projected_,
      ffn_hidden_, activated_, logits_, nll_;
  std::vector<std::unique_ptr<Buffer>> cache_;  // per layer: qkv rows of positions [0, seq)
  std::unique_ptr<Buffer> newest_;              // the newest position's hidden row
  std::unique_ptr<Buffer> picks_;               // AppendGreedy's picks, kGreedySteps ids
  int64_t cached_ = 0;
  int64_t weight_bytes_ = 0;
};

}  // namespace fsdpd::edge
