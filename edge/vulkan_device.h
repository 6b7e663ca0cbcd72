// Vulkan instance and device discovery for the edge backend (edge/vulkan_backend.cc): the
// instance with its validation messenger, the physical devices, their description for
// `fsdpd-edge devices`, and the cooperative-matrix feature structures that Debian 12's Vulkan
// headers predate. Internal to edge/.
#pragma once

#include <vulkan/vulkan.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "edge/vulkan_backend.h"

namespace fsdpd::edge {

// The VkResult's name, for error messages (VK_RETURN_IF_ERROR).
std::string ResultName(VkResult result);

#define VK_RETURN_IF_ERROR(call)                                                           \
  do {                                                                                     \
    const VkResult vk_result = (call);                                                     \
    if (vk_result != VK_SUCCESS) {                                                         \
      return absl::InternalError(absl::StrCat(#call, " failed: ", ResultName(vk_result))); \
    }                                                                                      \
  } while (0)

// The instance, with validation when asked. Errors reported by the layer are counted.
struct Instance {
  VkInstance instance = VK_NULL_HANDLE;
  uint32_t api_version = VK_API_VERSION_1_1;  // what the instance was created for
  VkDebugUtilsMessengerEXT messenger = VK_NULL_HANDLE;
  std::mutex mutex;
  int errors = 0;
  std::string last_error;

  ~Instance() {
    if (messenger != VK_NULL_HANDLE) {
      auto destroy = reinterpret_cast<PFN_vkDestroyDebugUtilsMessengerEXT>(
          vkGetInstanceProcAddr(instance, "vkDestroyDebugUtilsMessengerEXT"));
      if (destroy != nullptr) destroy(instance, messenger, nullptr);
    }
    if (instance != VK_NULL_HANDLE) vkDestroyInstance(instance, nullptr);
  }

  static VKAPI_ATTR VkBool32 VKAPI_CALL OnMessage(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                                  VkDebugUtilsMessageTypeFlagsEXT,
                                                  const VkDebugUtilsMessengerCallbackDataEXT* data,
                                                  void* user) {
    if (severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT) {
      auto* self = static_cast<Instance*>(user);
      std::lock_guard<std::mutex> lock(self->mutex);
      ++self->errors;
      self->last_error = data->pMessage != nullptr ? data->pMessage : "(no message)";
      fprintf(stderr, "fsdpd-edge: Vulkan validation error: %s\n", self->last_error.c_str());
    }
    return VK_FALSE;
  }
};

// The instance for the newest Vulkan the loader offers up to 1.3 (matmul_cm2.comp is SPIR-V
// 1.6, which needs 1.3; every other shader runs on 1.1), with validation when asked.
absl::StatusOr<std::unique_ptr<Instance>> CreateInstance(bool validation);
absl::StatusOr<std::vector<VkPhysicalDevice>> PhysicalDevices(VkInstance instance);
bool HasExtension(VkPhysicalDevice device, const char* name);
// The 16×16×16 fp16·fp16 + fp32 subgroup shape matmul_coop.comp is written for.
bool IsCoopShape(const VkCooperativeMatrixPropertiesNV& p);
// What `fsdpd-edge devices` prints; the NV cooperative-matrix shapes into coop_properties.
VulkanDeviceInfo DescribeDevice(VkInstance instance, VkPhysicalDevice device, int index,
                                std::vector<VkCooperativeMatrixPropertiesNV>* coop_properties);

// VK_KHR_cooperative_matrix's and VK_NV_cooperative_matrix2's feature structures, which
// Debian 12's Vulkan headers (1.3.239) predate: layouts and values as the Vulkan registry
// defines them.
constexpr const char* kKhrCooperativeMatrix = "VK_KHR_cooperative_matrix";
constexpr const char* kNvCooperativeMatrix2 = "VK_NV_cooperative_matrix2";
struct CoopMatrixFeaturesKhr {
  VkStructureType sType = static_cast<VkStructureType>(1000506000);
  void* pNext = nullptr;
  VkBool32 cooperativeMatrix = VK_FALSE;
  VkBool32 cooperativeMatrixRobustBufferAccess = VK_FALSE;
};
struct CoopMatrix2FeaturesNv {
  VkStructureType sType = static_cast<VkStructureType>(1000593000);
  void* pNext = nullptr;
  VkBool32 workgroupScope = VK_FALSE;
  VkBool32 flexibleDimensions = VK_FALSE;
  VkBool32 reductions = VK_FALSE;
  VkBool32 conversions = VK_FALSE;
  VkBool32 perElementOperations = VK_FALSE;
  VkBool32 tensorAddressing = VK_FALSE;
  VkBool32 blockLoads = VK_FALSE;
};

}  // namespace fsdpd::edge
