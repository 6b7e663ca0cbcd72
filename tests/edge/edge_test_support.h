// Shared by the edge runtime's tests: the Vulkan device they run on (lavapipe in CI, with the
// validation layer on), and exported-model files written directly.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "edge/vulkan_backend.h"
#include "formats/model_metadata.h"
#include "formats/safetensors.h"
#include "gtest/gtest.h"

namespace fsdpd::edge::testing {

// The Vulkan backend on the first device, validation on. A machine without a usable Vulkan
// device (lavapipe: mesa-vulkan-drivers) fails the test with the reason; it never skips.
inline std::unique_ptr<VulkanBackend> ValidatedVulkan(
    VulkanOptions::Precision precision = VulkanOptions::Precision::kAuto) {
  VulkanOptions options;
  options.validation = true;
  options.precision = precision;
  absl::StatusOr<std::unique_ptr<VulkanBackend>> backend = CreateVulkanBackend(options);
  EXPECT_TRUE(backend.ok()) << "no usable Vulkan device for the edge tests (CI runs them on "
                               "lavapipe: install mesa-vulkan-drivers and "
                               "vulkan-validationlayers): "
                            << backend.status();
  if (!backend.ok()) return nullptr;
  return std::move(*backend);
}

inline std::vector<float> RandomValues(int64_t count, float scale, uint64_t seed) {
  std::mt19937_64 engine(seed);
  std::uniform_real_distribution<float> uniform(-scale, scale);
  std::vector<float> values(static_cast<size_t>(count));
  for (float& value : values) value = uniform(engine);
  return values;
}

// Every tensor of `config` with random values (norm weights near 1), and the config in the
// metadata unless `with_config` is false.
inline std::vector<NamedTensor> RandomModelTensors(const ExportedModelConfig& c, uint64_t seed) {
  std::vector<NamedTensor> tensors;
  uint64_t next_seed = seed;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, float scale, float offset) {
    int64_t count = 1;
    for (int64_t d : shape) count *= d;
    NamedTensor tensor{name, shape, RandomValues(count, scale, ++next_seed)};
    for (float& value : tensor.values) value += offset;
    tensors.push_back(std::move(tensor));
  };
  const int64_t ffn = c.ffn_mult * c.dim;
  const float fan_in = 1.0f / std::sqrt(static_cast<float>(c.dim));
  for (int64_t layer = 0; layer < c.layers; ++layer) {
    const std::string p = "layers." + std::to_string(layer) + ".";
    add(p + "norm1.weight", {c.dim}, 0.1f, 1.0f);
    add(p + "attn.in_proj_weight", {3 * c.dim, c.dim}, fan_in, 0.0f);
    add(p + "attn.in_proj_bias", {3 * c.dim}, 0.1f, 0.0f);
    add(p + "attn.out_proj.weight", {c.dim, c.dim}, fan_in, 0.0f);
    add(p + "attn.out_proj.bias", {c.dim}, 0.1f, 0.0f);
    add(p + "norm2.weight", {c.dim}, 0.1f, 1.0f);
    add(p + "ffn.0.weight", {ffn, c.dim}, fan_in, 0.0f);
    add(p + "ffn.2.weight", {c.dim, ffn}, 1.0f / std::sqrt(static_cast<float>(ffn)), 0.0f);
  }
  add("embed.weight", {c.vocab, c.dim}, 1.0f, 0.0f);
  add("head.weight", {c.vocab, c.dim}, fan_in, 0.0f);
  if (c.final_norm) add("norm.weight", {c.dim}, 0.1f, 1.0f);
  return tensors;
}

inline void WriteModel(const std::string& path, const ExportedModelConfig& config,
                       const std::vector<NamedTensor>& tensors, bool with_config = true) {
  std::map<std::string, std::string> metadata = {{"format", "pt"}};
  if (with_config) AppendModelMetadata(config, &metadata);
  ASSERT_TRUE(WriteSafetensors(path, tensors, metadata).ok());
}

}  // namespace fsdpd::edge::testing
