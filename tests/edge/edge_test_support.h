// Shared by the edge runtime's tests: the Vulkan device they run on (lavapipe in CI, with the
// validation layer on), and exported-model files with random weights.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "edge/random_model.h"
#include "edge/vulkan_backend.h"
#include "formats/model_metadata.h"
#include "formats/safetensors.h"
#include "gtest/gtest.h"

namespace fsdpd::edge::testing {

// The unit roundoffs the kernel tests derive their bounds from: fp32's and fp16's.
constexpr double kU32 = 1.0 / (1 << 24);
constexpr double kU16 = 1.0 / (1 << 11);

// A Linear's rows × in · (out × in)ᵀ, with or without a bias.
struct LinearShape {
  int64_t rows, in, out;
  bool bias;
};

// The Vulkan backend on the first device, validation on. A machine without a usable Vulkan
// device (lavapipe: mesa-vulkan-drivers) fails the test with the reason; it never skips.
inline std::unique_ptr<VulkanBackend> ValidatedVulkan(
    VulkanOptions::Precision precision = VulkanOptions::Precision::kAuto,
    VulkanOptions::MatvecLayout matvec_layout = VulkanOptions::MatvecLayout::kAuto) {
  VulkanOptions options;
  options.validation = true;
  options.precision = precision;
  options.matvec_layout = matvec_layout;
  // fp16 activations for the matmuls wherever fp16 runs, so that lavapipe's tiled path covers
  // them too (its default keeps them fp32: VulkanOptions::matmul_inputs).
  options.matmul_inputs = VulkanOptions::MatmulInputs::kFp16;
  absl::StatusOr<std::unique_ptr<VulkanBackend>> backend = CreateVulkanBackend(options);
  EXPECT_TRUE(backend.ok()) << "no usable Vulkan device for the edge tests (CI runs them on "
                               "lavapipe: install mesa-vulkan-drivers and "
                               "vulkan-validationlayers): "
                            << backend.status();
  if (!backend.ok()) return nullptr;
  return std::move(*backend);
}

// The Vulkan backend with `options` as given (validation on where they say so). A machine
// without a usable device fails the test with the reason, as ValidatedVulkan does.
inline std::unique_ptr<VulkanBackend> VulkanWith(const VulkanOptions& options) {
  absl::StatusOr<std::unique_ptr<VulkanBackend>> backend = CreateVulkanBackend(options);
  EXPECT_TRUE(backend.ok()) << "no usable Vulkan device (CI runs on lavapipe): "
                            << backend.status();
  return backend.ok() ? std::move(*backend) : nullptr;
}

using edge::RandomValues;

// The edge runtime's random model (edge/random_model.h) with norm weights and biases spread by
// 0.1, so that a kernel mixing up a norm weight or a bias would show.
inline std::vector<NamedTensor> RandomModelTensors(const ExportedModelConfig& config,
                                                   uint64_t seed) {
  return edge::RandomModelTensors(config, seed, /*noise=*/0.1f);
}

inline void WriteModel(const std::string& path, const ExportedModelConfig& config,
                       const std::vector<NamedTensor>& tensors, bool with_config = true) {
  ASSERT_TRUE(edge::WriteExportedModel(path, config, tensors, with_config).ok());
}

}  // namespace fsdpd::edge::testing
