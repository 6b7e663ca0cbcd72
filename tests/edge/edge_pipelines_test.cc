// VulkanContext::MakePipelines on lavapipe with the validation layer: pipelines built on several
// threads land in the Pipeline each request names, with that request's layout, whatever the
// thread count, and without a validation error (the layer checks the calls from every thread).
#include <memory>
#include <vector>

#include "absl/status/status.h"
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

struct Wanted {
  Shader shader;
  uint32_t bindings, push_bytes;
};

// Every shader lavapipe builds (no cooperative matrices there), with the layouts the backend
// gives them: different binding counts and push sizes, so a pipeline in the wrong slot shows.
const std::vector<Wanted>& LavapipeShaders() {
  static const auto* shaders = new std::vector<Wanted>{{Shader::kEmbedding, 3, 8},
                                                       {Shader::kEmbeddingF16, 3, 8},
                                                       {Shader::kElementwise, 3, 8},
                                                       {Shader::kToHalf, 2, 4},
                                                       {Shader::kRmsNorm, 3, 12},
                                                       {Shader::kRmsNormF16, 3, 12},
                                                       {Shader::kTokenNll, 3, 8},
                                                       {Shader::kAttention, 2, 28},
                                                       {Shader::kMatmul, 4, 16},
                                                       {Shader::kMatmulF16, 4, 16},
                                                       {Shader::kMatvec, 4, 16},
                                                       {Shader::kMatvecF16, 4, 16},
                                                       {Shader::kMatvecWide, 4, 16},
                                                       {Shader::kMatvecF16Wide, 4, 16},
                                                       {Shader::kMatvecF16HalfXWide, 4, 16}};
  return *shaders;
}

TEST(EdgePipelinesTest, EachRequestGetsItsOwnPipelineOnAnyThreadCount) {
  std::unique_ptr<VulkanContext> context = ValidatedContext();
  ASSERT_NE(context, nullptr);
  const std::vector<Wanted>& wanted = LavapipeShaders();
  for (const int threads : {1, 4, 0, 64}) {
    SCOPED_TRACE(::testing::Message() << threads << " threads");
    std::vector<Pipeline> pipelines(wanted.size());
    std::vector<VulkanContext::PipelineRequest> requests;
    for (size_t i = 0; i < wanted.size(); ++i) {
      requests.push_back(
          {wanted[i].shader, wanted[i].bindings, wanted[i].push_bytes, &pipelines[i]});
    }
    const std::vector<absl::Status> made = context->MakePipelines(requests, threads);
    ASSERT_EQ(made.size(), wanted.size());
    for (size_t i = 0; i < wanted.size(); ++i) {
      SCOPED_TRACE(ShaderName(wanted[i].shader));
      EXPECT_TRUE(made[i].ok()) << made[i];
      EXPECT_NE(pipelines[i].pipeline, VK_NULL_HANDLE);
      EXPECT_NE(pipelines[i].layout, VK_NULL_HANDLE);
      EXPECT_EQ(pipelines[i].bindings, wanted[i].bindings);
      EXPECT_EQ(pipelines[i].push_bytes, wanted[i].push_bytes);
    }
    for (Pipeline& pipeline : pipelines) context->DestroyPipeline(&pipeline);
  }
  EXPECT_TRUE(context->MakePipelines({}, 8).empty());
  EXPECT_EQ(context->validation_errors(), 0) << context->last_validation_error();
}

}  // namespace
}  // namespace fsdpd::edge
