// The model section of a job spec, carried in an exported safetensors file's "__metadata__"
// so that a reader without the spec (fsdpd-edge, PyTorch) knows the architecture. The keys
// are the ModelSpec field names (proto/fsdpd/v1/spec.proto); values are strings, as the
// safetensors format requires. The tensors keep their PyTorch state_dict names.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace fsdpd {

// The value of the "architecture" key: fsdpd's MiniLLM (docs/architecture.md), or a Llama
// (model.arch llama: Hugging Face's LlamaForCausalLM names), which ParseModelMetadata, the
// MiniLLM reader, refuses by this key.
inline constexpr char kMiniLlmArchitecture[] = "fsdpd.MiniLLM";
inline constexpr char kLlamaArchitecture[] = "fsdpd.Llama";

struct ExportedModelConfig {
  int64_t vocab = 0;
  int64_t dim = 0;
  int64_t layers = 0;
  int64_t heads = 0;
  int64_t ffn_mult = 0;  // the FFN's hidden width is ffn_mult · dim
  bool causal = false;
  bool final_norm = false;
  double norm_eps = 0.0;  // the value in effect (never 0), written with full precision
};

// Adds architecture, vocab, dim, layers, heads, ffn_mult, causal, final_norm and norm_eps.
void AppendModelMetadata(const ExportedModelConfig& config,
                         std::map<std::string, std::string>* metadata);

struct ExportedLlamaConfig {
  int64_t vocab = 0;
  int64_t dim = 0;
  int64_t layers = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;  // in effect (never 0)
  int64_t ffn_dim = 0;   // in effect (never 0)
  double rope_theta = 0.0;
  bool tie_embeddings = false;
  double norm_eps = 0.0;  // in effect (never 0), with full precision
};

// Adds architecture (kLlamaArchitecture), arch, vocab, dim, layers, heads, kv_heads, ffn_dim,
// rope_theta, tie_embeddings and norm_eps: the model section of a llama job's spec.
void AppendLlamaMetadata(const ExportedLlamaConfig& config,
                         std::map<std::string, std::string>* metadata);

// The inverse of AppendModelMetadata; `source` names the file in errors. A file without the keys
// (an export from before they were written, or another tool's file) is INVALID_ARGUMENT saying so.
absl::StatusOr<ExportedModelConfig> ParseModelMetadata(
    const std::map<std::string, std::string>& metadata, const std::string& source);

// Every tensor an exported MiniLLM of `config` holds, by its PyTorch name, in export order.
struct ExportedTensorShape {
  std::string name;
  std::vector<int64_t> shape;
};
std::vector<ExportedTensorShape> ExportedModelTensors(const ExportedModelConfig& config);

}  // namespace fsdpd
