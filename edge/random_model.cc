#include "edge/random_model.h"

#include <cmath>
#include <map>

#include "absl/strings/match.h"

namespace fsdpd::edge {

std::vector<float> RandomValues(int64_t count, float scale, uint64_t seed) {
  std::vector<float> values(static_cast<size_t>(count));
  uint64_t state = seed * 0x9e3779b97f4a7c15ull + 1;
  for (float& value : values) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    // 24 random bits as a float in [0, 2), shifted to [-1, 1).
    value = scale * (static_cast<float>(state >> 40) * 0x1.0p-23f - 1.0f);
  }
  return values;
}

std::vector<NamedTensor> RandomModelTensors(const ExportedModelConfig& config, uint64_t seed,
                                            float noise) {
  std::vector<NamedTensor> tensors;
  uint64_t next_seed = seed;
  for (ExportedTensorShape& spec : ExportedModelTensors(config)) {
    int64_t count = 1;
    for (int64_t d : spec.shape) count *= d;
    const bool norm_weight = absl::EndsWith(spec.name, "norm1.weight") ||
                             absl::EndsWith(spec.name, "norm2.weight") ||
                             spec.name == "norm.weight";
    const float offset = norm_weight ? 1.0f : 0.0f;
    float scale = noise;  // a norm weight or a bias
    if (spec.name == "embed.weight") {
      scale = 1.0f;
    } else if (spec.shape.size() == 2) {
      scale = 1.0f / std::sqrt(static_cast<float>(spec.shape[1]));
    }
    NamedTensor tensor{std::move(spec.name), std::move(spec.shape),
                       RandomValues(count, scale, ++next_seed)};
    for (float& value : tensor.values) value += offset;
    tensors.push_back(std::move(tensor));
  }
  return tensors;
}

absl::Status WriteExportedModel(const std::string& path, const ExportedModelConfig& config,
                                const std::vector<NamedTensor>& tensors, bool with_config) {
  std::map<std::string, std::string> metadata = {{"format", "pt"}, {"step", "0"}};
  if (with_config) AppendModelMetadata(config, &metadata);
  return WriteSafetensors(path, tensors, metadata);
}

}  // namespace fsdpd::edge
