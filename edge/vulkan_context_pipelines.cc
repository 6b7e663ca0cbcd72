// VulkanContext's pipelines: each built from a shader variant's SPIR-V and layout (one
// descriptor set of storage buffers and one push-constant range), several at once on threads,
// destroyed, and the driver's statistics of one read back.
#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/run_on_threads.h"
#include "base/status_macros.h"
#include "edge/vulkan_context.h"

namespace fsdpd::edge {

void VulkanContext::DestroyPipeline(Pipeline* p) {
  // A layout made later may get this one's handle: no kept set may be found under it.
  for (auto it = sets_.begin(); it != sets_.end();) {
    it = it->first.first == p->set_layout ? sets_.erase(it) : std::next(it);
  }
  if (p->pipeline != VK_NULL_HANDLE) vkDestroyPipeline(device_, p->pipeline, nullptr);
  if (p->layout != VK_NULL_HANDLE) vkDestroyPipelineLayout(device_, p->layout, nullptr);
  if (p->set_layout != VK_NULL_HANDLE) {
    vkDestroyDescriptorSetLayout(device_, p->set_layout, nullptr);
  }
  *p = Pipeline{};
}

absl::Status VulkanContext::MakePipeline(const ShaderVariant& shader, Pipeline* out) {
  if (!shader.built()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the ", shader.name, " shader (", shader.source, " ", shader.defines,
                     ") is not in this build: it needs slang's glslang (edge/CMakeLists.txt)"));
  }
  const SpirV code = shader.code;
  const uint32_t bindings = shader.bindings;
  VkShaderModuleCreateInfo module_info{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
  module_info.codeSize = code.bytes;
  module_info.pCode = code.words;
  VkShaderModule module;
  VK_RETURN_IF_ERROR(vkCreateShaderModule(device_, &module_info, nullptr, &module));
  std::vector<VkDescriptorSetLayoutBinding> layout_bindings(bindings);
  for (uint32_t b = 0; b < bindings; ++b) {
    layout_bindings[b] = {b, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT,
                          nullptr};
  }
  VkDescriptorSetLayoutCreateInfo set_info{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
  set_info.bindingCount = bindings;
  set_info.pBindings = layout_bindings.data();
  VK_RETURN_IF_ERROR(vkCreateDescriptorSetLayout(device_, &set_info, nullptr, &out->set_layout));
  VkPushConstantRange range{VK_SHADER_STAGE_COMPUTE_BIT, 0, shader.push_bytes};
  VkPipelineLayoutCreateInfo layout_info{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
  layout_info.setLayoutCount = 1;
  layout_info.pSetLayouts = &out->set_layout;
  layout_info.pushConstantRangeCount = 1;
  layout_info.pPushConstantRanges = &range;
  VK_RETURN_IF_ERROR(vkCreatePipelineLayout(device_, &layout_info, nullptr, &out->layout));
  VkComputePipelineCreateInfo pipeline_info{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
  pipeline_info.stage = {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO};
  pipeline_info.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  pipeline_info.stage.module = module;
  pipeline_info.stage.pName = "main";
  pipeline_info.layout = out->layout;
  if (statistics_) pipeline_info.flags = VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR;
  const VkResult created =
      vkCreateComputePipelines(device_, VK_NULL_HANDLE, 1, &pipeline_info, nullptr, &out->pipeline);
  vkDestroyShaderModule(device_, module, nullptr);
  if (created != VK_SUCCESS) {
    return absl::InternalError(absl::StrCat("cannot build the ", shader.name, " pipeline on '",
                                            info_.name, "': ", ResultName(created)));
  }
  out->bindings = bindings;
  out->push_bytes = shader.push_bytes;
  out->name = shader.name;
  return absl::OkStatus();
}

absl::StatusOr<std::string> VulkanContext::Statistics(const Pipeline& pipeline) const {
  if (!statistics_) {
    return absl::UnavailableError(
        absl::StrCat("device '", info_.name,
                     "' keeps no pipeline statistics here (VK_KHR_pipeline_executable_properties "
                     "absent, or VulkanOptions::pipeline_statistics off)"));
  }
  auto properties = reinterpret_cast<PFN_vkGetPipelineExecutablePropertiesKHR>(
      vkGetDeviceProcAddr(device_, "vkGetPipelineExecutablePropertiesKHR"));
  auto statistics = reinterpret_cast<PFN_vkGetPipelineExecutableStatisticsKHR>(
      vkGetDeviceProcAddr(device_, "vkGetPipelineExecutableStatisticsKHR"));
  if (properties == nullptr || statistics == nullptr) {
    return absl::UnavailableError("the driver exports no pipeline statistics functions");
  }
  VkPipelineInfoKHR info{VK_STRUCTURE_TYPE_PIPELINE_INFO_KHR};
  info.pipeline = pipeline.pipeline;
  uint32_t executables = 0;
  VK_RETURN_IF_ERROR(properties(device_, &info, &executables, nullptr));
  std::string text;
  for (uint32_t e = 0; e < executables; ++e) {
    VkPipelineExecutableInfoKHR executable{VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR};
    executable.pipeline = pipeline.pipeline;
    executable.executableIndex = e;
    uint32_t count = 0;
    VK_RETURN_IF_ERROR(statistics(device_, &executable, &count, nullptr));
    std::vector<VkPipelineExecutableStatisticKHR> values(
        count, {VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR});
    VK_RETURN_IF_ERROR(statistics(device_, &executable, &count, values.data()));
    for (const VkPipelineExecutableStatisticKHR& value : values) {
      std::string number;
      switch (value.format) {
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR:
          number = value.value.b32 ? "yes" : "no";
          break;
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR:
          number = absl::StrCat(value.value.i64);
          break;
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR:
          number = absl::StrCat(value.value.u64);
          break;
        default:
          number = absl::StrCat(value.value.f64);
      }
      absl::StrAppend(&text, text.empty() ? "" : ", ", value.name, " ", number);
    }
  }
  return text.empty() ? "no statistics reported" : text;
}

std::vector<absl::Status> VulkanContext::MakePipelines(const std::vector<PipelineRequest>& requests,
                                                       int threads) {
  std::vector<absl::Status> made(requests.size());
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads = std::min<int>(threads, static_cast<int>(requests.size()));
  // Pipeline creation is thread-safe on one VkDevice (no object here is shared between the
  // calls); each thread takes the next request until none is left.
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < requests.size(); i = next++) {
      const PipelineRequest& r = requests[i];
      made[i] = MakePipeline(*r.shader, r.out);
    }
  };
  RunOnThreads(threads, [&](int) { work(); });
  return made;
}

}  // namespace fsdpd::edge
