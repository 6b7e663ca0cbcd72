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

// The value of the "architecture" key: fsdpd's MiniLLM (docs/architecture.md).
inline constexpr char kMiniLlmArchitecture[] = "fsdpd.MiniLLM";

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

// The inverse; `source` names the file in errors. A file without the keys (an export from
// before they were written, or another tool's file) is INVALID_ARGUMENT saying so.
absl::StatusOr<ExportedModelConfig> ParseModelMetadata(
    const std::map<std::string, std::string>& metadata, const std::string& source);

// Every tensor an exported MiniLLM of `config` holds, by its PyTorch name, in export order.
struct ExportedTensorShape {
  std::string name;
  std::vector<int64_t> shape;
};
std::vector<ExportedTensorShape> ExportedModelTensors(const ExportedModelConfig& config);

}  // namespace fsdpd
