// VulkanContext's pipelines on lavapipe with the validation layer: pipelines built on several
// threads land in the Pipeline each request names, with that request's layout, whatever the
// thread count, and without a validation error (the layer checks the calls from every thread);
// every listed shader variant the device can run builds with its listed layout; a variant
// without code is refused.
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "bench/edge_shaders/variants.h"
#include "edge/shaders.h"
#include "edge/vulkan_context.h"
#include "gtest/gtest.h"

namespace fsdpd::edge {
namespace {

std::unique_ptr<VulkanContext> ValidatedContext() {
  VulkanOptions options;
  options.validation = true;
  options.precision = VulkanOptions::Precision::kFp16;
  absl::StatusOr<std::unique_ptr<VulkanContext>> context = VulkanContext::Create(options);
  EXPECT_TRUE(context.ok()) << "no usable Vulkan device (CI runs on lavapipe): "
                            << context.status();
  return context.ok() ? std::move(*context) : nullptr;
}

// Every shader lavapipe builds (no cooperative matrices there), each with its own layout
// (edge/shaders/variants.cmake): different binding counts and push sizes, so a pipeline in the
// wrong slot shows.
std::vector<Shader> LavapipeShaders() {
  return {Shader::kEmbedding,  Shader::kEmbeddingF16,  Shader::kElementwise,
          Shader::kToHalf,     Shader::kRmsNorm,       Shader::kRmsNormF16,
          Shader::kTokenNll,   Shader::kAttention,     Shader::kMatmul,
          Shader::kMatmulF16,  Shader::kMatvec,        Shader::kMatvecF16,
          Shader::kMatvecWide, Shader::kMatvecF16Wide, Shader::kMatvecF16HalfXWide};
}

TEST(EdgePipelinesTest, EachRequestGetsItsOwnPipelineOnAnyThreadCount) {
  std::unique_ptr<VulkanContext> context = ValidatedContext();
  ASSERT_NE(context, nullptr);
  const std::vector<Shader> wanted = LavapipeShaders();
  for (const int threads : {1, 4, 0, 64}) {
    SCOPED_TRACE(::testing::Message() << threads << " threads");
    std::vector<Pipeline> pipelines(wanted.size());
    std::vector<VulkanContext::PipelineRequest> requests;
    for (size_t i = 0; i < wanted.size(); ++i) {
      requests.push_back({&VariantOf(wanted[i]), &pipelines[i]});
    }
    const std::vector<absl::Status> made = context->MakePipelines(requests, threads);
    ASSERT_EQ(made.size(), wanted.size());
    for (size_t i = 0; i < wanted.size(); ++i) {
      const ShaderVariant& shader = VariantOf(wanted[i]);
      SCOPED_TRACE(shader.name);
      EXPECT_TRUE(made[i].ok()) << made[i];
      EXPECT_NE(pipelines[i].pipeline, VK_NULL_HANDLE);
      EXPECT_NE(pipelines[i].layout, VK_NULL_HANDLE);
      EXPECT_EQ(pipelines[i].bindings, shader.bindings);
      EXPECT_EQ(pipelines[i].push_bytes, shader.push_bytes);
      EXPECT_STREQ(pipelines[i].name, shader.name);
    }
    for (Pipeline& pipeline : pipelines) context->DestroyPipeline(&pipeline);
  }
  EXPECT_TRUE(context->MakePipelines({}, 8).empty());
  EXPECT_EQ(context->validation_errors(), 0) << context->last_validation_error();
}

// Every listed variant the device can run (on lavapipe all but those on cooperative matrices)
// builds a pipeline with its own layout from the list, and the validation layer finds nothing:
// a layout with fewer buffers or push-constant bytes than the shader uses is an error there.
template <typename Enum>
void ExpectEachBuilds(VulkanContext& context, int count) {
  int built = 0;
  for (int i = 0; i < count; ++i) {
    const ShaderVariant& shader = VariantOf(static_cast<Enum>(i));
    SCOPED_TRACE(shader.id);
    if ((shader.matrices == Matrices::kSubgroup && !context.coop()) ||
        (shader.matrices == Matrices::kWorkgroup && (!context.cm2() || !shader.built()))) {
      continue;
    }
    Pipeline pipeline;
    const absl::Status made = context.MakePipeline(shader, &pipeline);
    EXPECT_TRUE(made.ok()) << made;
    EXPECT_EQ(context.validation_errors(), 0) << context.last_validation_error();
    context.DestroyPipeline(&pipeline);
    ++built;
  }
  if (context.coop() && context.cm2()) {
    EXPECT_EQ(built, count);
  }
}

TEST(EdgePipelinesTest, EveryListedVariantBuildsWithItsLayout) {
  std::unique_ptr<VulkanContext> context = ValidatedContext();
  ASSERT_NE(context, nullptr);
  ExpectEachBuilds<Shader>(*context, kShaderCount);
  ExpectEachBuilds<ProbeShader>(*context, kProbeShaderCount);
}

// A variant this build could not compile (no code) is refused by name, not handed to the driver.
TEST(EdgePipelinesTest, AVariantWithoutCodeIsRefusedByName) {
  std::unique_ptr<VulkanContext> context = ValidatedContext();
  ASSERT_NE(context, nullptr);
  ShaderVariant missing = VariantOf(Shader::kMatmulCm2);
  missing.code = {nullptr, 0};
  Pipeline pipeline;
  const absl::Status made = context->MakePipeline(missing, &pipeline);
  EXPECT_EQ(made.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(made.message(),
            "the matmul (workgroup-scope cooperative matrix) shader (matmul_cm2.comp -DBM=128 "
            "-DBN=128 -DBK=32) is not in this build: it needs slang's glslang "
            "(edge/CMakeLists.txt)");
  EXPECT_EQ(pipeline.pipeline, VK_NULL_HANDLE);
  EXPECT_EQ(context->validation_errors(), 0) << context->last_validation_error();
}

}  // namespace
}  // namespace fsdpd::edge
