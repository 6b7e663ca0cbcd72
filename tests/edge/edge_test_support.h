// Shared by the edge runtime's tests: the Vulkan device they run on (lavapipe in CI, with the
// validation layer on), and exported-model files with random weights.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/casts.h"
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

// `floats` activations on `backend`, every one `value`; null (and a failure) where they cannot be
// made.
inline std::unique_ptr<Buffer> Filled(Backend& backend, float value, int64_t floats) {
  absl::StatusOr<std::unique_ptr<Buffer>> buffer = backend.Floats(floats);
  EXPECT_TRUE(buffer.ok()) << buffer.status();
  if (!buffer.ok()) return nullptr;
  const std::vector<float> values(static_cast<size_t>(floats), value);
  EXPECT_TRUE(backend.WriteFloats(**buffer, values.data(), floats).ok());
  return std::move(*buffer);
}

// Every one of the `floats` elements of `buffer` equals `expected` (for sums of small integers,
// exact in fp32).
inline void ExpectAll(Backend& backend, Buffer& buffer, float expected, int64_t floats) {
  std::vector<float> values(static_cast<size_t>(floats), -1.0f);
  ASSERT_TRUE(backend.ReadFloats(buffer, values.data(), floats).ok());
  for (int64_t i = 0; i < floats; ++i) ASSERT_EQ(values[i], expected) << "element " << i;
}

// LinearAdd against Linear then Add on the same backend and inputs (x, weight and bias already
// placed; out starting as `residual`): bit for bit, since the product is rounded to fp32 and then
// added as Add adds it, and no element may keep its residual value. The product's buffer is
// poisoned first.
inline void ExpectLinearAddIsLinearThenAdd(Backend& backend, Buffer& x, Buffer& weight,
                                           Buffer* bias, const LinearShape& s,
                                           const std::vector<float>& residual) {
  const int64_t count = s.rows * s.out;
  ASSERT_EQ(static_cast<int64_t>(residual.size()), count);
  const std::vector<float> poison(static_cast<size_t>(count), std::nanf(""));
  std::unique_ptr<Buffer> fused = *backend.Floats(count), apart = *backend.Floats(count);
  std::unique_ptr<Buffer> product = *backend.Floats(count);
  ASSERT_TRUE(backend.WriteFloats(*fused, residual.data(), count).ok());
  ASSERT_TRUE(backend.WriteFloats(*apart, residual.data(), count).ok());
  ASSERT_TRUE(backend.WriteFloats(*product, poison.data(), count).ok());
  ASSERT_TRUE(backend.LinearAdd(x, weight, bias, s.rows, s.in, s.out, *fused).ok());
  ASSERT_TRUE(backend.Linear(x, weight, bias, s.rows, s.in, s.out, *product).ok());
  ASSERT_TRUE(backend.Add(*apart, *product, count, *apart).ok());
  std::vector<float> got(static_cast<size_t>(count)), want(got.size());
  ASSERT_TRUE(backend.ReadFloats(*fused, got.data(), count).ok());
  ASSERT_TRUE(backend.ReadFloats(*apart, want.data(), count).ok());
  for (int64_t i = 0; i < count; ++i) {
    ASSERT_EQ(got[i], want[i]) << "out[" << i << "], residual " << residual[i];
    ASSERT_NE(got[i], residual[i]) << "out[" << i << "] kept its old value";
  }
}

// The columns-a-subgroup layouts (kWide2, kWide4) against the wide one: `use` switches the
// backend to a layout, `run` returns a shape's Linear output on it (fresh inputs from the same
// seeds each time). Each column adds its products in the wide layout's order, so every output
// must be the wide layout's bits.
inline void ExpectSubgroupColumnsGiveTheWideBits(
    const std::vector<LinearShape>& shapes,
    const std::function<void(VulkanOptions::MatvecLayout)>& use,
    const std::function<std::vector<float>(const LinearShape&)>& run) {
  use(VulkanOptions::MatvecLayout::kWide);
  std::vector<std::vector<float>> wide;
  for (const LinearShape& s : shapes) wide.push_back(run(s));
  for (const auto layout :
       {VulkanOptions::MatvecLayout::kWide2, VulkanOptions::MatvecLayout::kWide4}) {
    SCOPED_TRACE(MatvecLayoutName(layout));
    use(layout);
    for (size_t i = 0; i < shapes.size(); ++i) {
      const LinearShape& s = shapes[i];
      SCOPED_TRACE(::testing::Message() << s.rows << "x" << s.in << " · " << s.out);
      const std::vector<float> got = run(s);
      ASSERT_EQ(got.size(), wide[i].size());
      for (size_t j = 0; j < got.size(); ++j) {
        ASSERT_EQ(absl::bit_cast<uint32_t>(got[j]), absl::bit_cast<uint32_t>(wide[i][j]))
            << "out[" << j << "]: " << got[j] << " against the wide layout's " << wide[i][j];
      }
    }
  }
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
