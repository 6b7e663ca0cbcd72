#include "edge/vulkan_device.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"

namespace fsdpd::edge {
namespace {

std::string DeviceTypeName(VkPhysicalDeviceType type) {
  switch (type) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU:
      return "discrete";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU:
      return "integrated";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU:
      return "virtual";
    case VK_PHYSICAL_DEVICE_TYPE_CPU:
      return "cpu";
    default:
      return "other";
  }
}

std::string ComponentName(VkComponentTypeNV type) {
  switch (type) {
    case VK_COMPONENT_TYPE_FLOAT16_NV:
      return "fp16";
    case VK_COMPONENT_TYPE_FLOAT32_NV:
      return "fp32";
    case VK_COMPONENT_TYPE_FLOAT64_NV:
      return "fp64";
    case VK_COMPONENT_TYPE_SINT8_NV:
      return "s8";
    case VK_COMPONENT_TYPE_UINT8_NV:
      return "u8";
    case VK_COMPONENT_TYPE_SINT32_NV:
      return "s32";
    case VK_COMPONENT_TYPE_UINT32_NV:
      return "u32";
    default:
      return absl::StrCat("type", static_cast<int>(type));
  }
}

const char* const kNoDeviceHelp =
    " (install a Vulkan driver; on a machine without a GPU, lavapipe from mesa-vulkan-drivers, "
    "and check VK_ICD_FILENAMES if it is set)";

}  // namespace

std::string ResultName(VkResult result) {
  switch (result) {
    case VK_ERROR_OUT_OF_HOST_MEMORY:
      return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY:
      return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
    case VK_ERROR_INITIALIZATION_FAILED:
      return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_DEVICE_LOST:
      return "VK_ERROR_DEVICE_LOST";
    case VK_ERROR_LAYER_NOT_PRESENT:
      return "VK_ERROR_LAYER_NOT_PRESENT";
    case VK_ERROR_EXTENSION_NOT_PRESENT:
      return "VK_ERROR_EXTENSION_NOT_PRESENT";
    case VK_ERROR_FEATURE_NOT_PRESENT:
      return "VK_ERROR_FEATURE_NOT_PRESENT";
    case VK_ERROR_INCOMPATIBLE_DRIVER:
      return "VK_ERROR_INCOMPATIBLE_DRIVER";
    case VK_ERROR_OUT_OF_POOL_MEMORY:
      return "VK_ERROR_OUT_OF_POOL_MEMORY";
    default:
      return absl::StrCat("VkResult ", static_cast<int>(result));
  }
}

// The loader opens the drivers for each instance (dlopen) and closes them with it (dlclose).
// glibc never gives back the static TLS a closed library held, and NVIDIA's driver takes some
// each time it is opened: after about thirty instances had come and gone in one process, its
// next open failed and vkCreateInstance answered VK_ERROR_INCOMPATIBLE_DRIVER
// (tests/edge/edge_lifecycle_test.cc; the loader's own message, "libnvidia-tls.so: cannot
// allocate memory in static TLS block", is in bench/RESULTS.md). One instance, made before the
// first and never destroyed, keeps the drivers open for the process's life, so they are opened
// once. Where it cannot be made, the instance asked for fails with the reason.
void KeepDriversLoaded() {
  static VkInstance kept = [] {
    VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
    app.pApplicationName = "fsdpd-edge (drivers kept loaded)";
    app.apiVersion = VK_API_VERSION_1_1;
    VkInstanceCreateInfo info{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
    info.pApplicationInfo = &app;
    VkInstance instance = VK_NULL_HANDLE;
    return vkCreateInstance(&info, nullptr, &instance) == VK_SUCCESS ? instance : VK_NULL_HANDLE;
  }();
  (void)kept;
}

absl::StatusOr<std::unique_ptr<Instance>> CreateInstance(bool validation) {
  KeepDriversLoaded();
  auto result = std::make_unique<Instance>();
  uint32_t loader_version = VK_API_VERSION_1_0;
  auto enumerate_version = reinterpret_cast<PFN_vkEnumerateInstanceVersion>(
      vkGetInstanceProcAddr(nullptr, "vkEnumerateInstanceVersion"));
  if (enumerate_version != nullptr) enumerate_version(&loader_version);
  if (loader_version < VK_API_VERSION_1_1) {
    return absl::FailedPreconditionError(
        "the Vulkan loader offers only Vulkan 1.0; fsdpd-edge "
        "needs 1.1");
  }
  VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
  app.pApplicationName = "fsdpd-edge";
  // 1.3 where the loader has it: matmul_cm2.comp is SPIR-V 1.6, which needs a Vulkan 1.3
  // device; every other shader is SPIR-V 1.0 and runs on 1.1.
  result->api_version = std::min<uint32_t>(loader_version, VK_API_VERSION_1_3);
  app.apiVersion = result->api_version;
  std::vector<const char*> layers, extensions;
  VkDebugUtilsMessengerCreateInfoEXT messenger_info{
      VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT};
  messenger_info.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT |
                                   VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT;
  messenger_info.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT |
                               VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                               VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
  messenger_info.pfnUserCallback = &Instance::OnMessage;
  messenger_info.pUserData = result.get();
  if (validation) {
    uint32_t count = 0;
    vkEnumerateInstanceLayerProperties(&count, nullptr);
    std::vector<VkLayerProperties> available(count);
    vkEnumerateInstanceLayerProperties(&count, available.data());
    const bool found = std::any_of(available.begin(), available.end(), [](const auto& layer) {
      return std::strcmp(layer.layerName, "VK_LAYER_KHRONOS_validation") == 0;
    });
    if (!found) {
      return absl::FailedPreconditionError(
          "validation was asked for but VK_LAYER_KHRONOS_validation is not installed "
          "(Debian: vulkan-validationlayers)");
    }
    layers.push_back("VK_LAYER_KHRONOS_validation");
    extensions.push_back(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
  }
  VkInstanceCreateInfo info{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  info.pApplicationInfo = &app;
  info.enabledLayerCount = static_cast<uint32_t>(layers.size());
  info.ppEnabledLayerNames = layers.data();
  info.enabledExtensionCount = static_cast<uint32_t>(extensions.size());
  info.ppEnabledExtensionNames = extensions.data();
  if (validation) info.pNext = &messenger_info;
  const VkResult created = vkCreateInstance(&info, nullptr, &result->instance);
  if (created == VK_ERROR_INCOMPATIBLE_DRIVER) {
    // The loader's answer is named: it is also what a driver that could not be opened again
    // gives (KeepDriversLoaded), where "no driver" alone would mislead.
    return absl::NotFoundError(absl::StrCat(
        "no Vulkan driver found (vkCreateInstance: VK_ERROR_INCOMPATIBLE_DRIVER)", kNoDeviceHelp));
  }
  if (created != VK_SUCCESS) {
    return absl::InternalError(absl::StrCat("vkCreateInstance failed: ", ResultName(created)));
  }
  if (validation) {
    auto create = reinterpret_cast<PFN_vkCreateDebugUtilsMessengerEXT>(
        vkGetInstanceProcAddr(result->instance, "vkCreateDebugUtilsMessengerEXT"));
    if (create == nullptr) {
      return absl::FailedPreconditionError("VK_EXT_debug_utils is missing its entry points");
    }
    VK_RETURN_IF_ERROR(create(result->instance, &messenger_info, nullptr, &result->messenger));
  }
  return result;
}

absl::StatusOr<std::vector<VkPhysicalDevice>> PhysicalDevices(VkInstance instance) {
  uint32_t count = 0;
  VK_RETURN_IF_ERROR(vkEnumeratePhysicalDevices(instance, &count, nullptr));
  if (count == 0) return absl::NotFoundError(absl::StrCat("no Vulkan device found", kNoDeviceHelp));
  std::vector<VkPhysicalDevice> devices(count);
  VK_RETURN_IF_ERROR(vkEnumeratePhysicalDevices(instance, &count, devices.data()));
  return devices;
}

bool HasExtension(VkPhysicalDevice device, const char* name) {
  uint32_t count = 0;
  vkEnumerateDeviceExtensionProperties(device, nullptr, &count, nullptr);
  std::vector<VkExtensionProperties> extensions(count);
  vkEnumerateDeviceExtensionProperties(device, nullptr, &count, extensions.data());
  return std::any_of(extensions.begin(), extensions.end(),
                     [&](const auto& e) { return std::strcmp(e.extensionName, name) == 0; });
}

bool IsCoopShape(const VkCooperativeMatrixPropertiesNV& p) {
  return p.MSize == 16 && p.NSize == 16 && p.KSize == 16 &&
         p.AType == VK_COMPONENT_TYPE_FLOAT16_NV && p.BType == VK_COMPONENT_TYPE_FLOAT16_NV &&
         p.CType == VK_COMPONENT_TYPE_FLOAT32_NV && p.DType == VK_COMPONENT_TYPE_FLOAT32_NV &&
         p.scope == VK_SCOPE_SUBGROUP_NV;
}

VulkanDeviceInfo DescribeDevice(VkInstance instance, VkPhysicalDevice device, int index,
                                std::vector<VkCooperativeMatrixPropertiesNV>* coop_properties) {
  VulkanDeviceInfo info;
  info.index = index;
  VkPhysicalDeviceSubgroupProperties subgroup{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
  VkPhysicalDeviceProperties2 properties{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
  properties.pNext = &subgroup;
  vkGetPhysicalDeviceProperties2(device, &properties);
  info.name = properties.properties.deviceName;
  info.type = DeviceTypeName(properties.properties.deviceType);
  const uint32_t api = properties.properties.apiVersion;
  info.api_version = absl::StrCat(VK_API_VERSION_MAJOR(api), ".", VK_API_VERSION_MINOR(api), ".",
                                  VK_API_VERSION_PATCH(api));
  info.subgroup_size = subgroup.subgroupSize;
  const bool compute = (subgroup.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) != 0;
  info.subgroup_shuffle =
      compute && (subgroup.supportedOperations & VK_SUBGROUP_FEATURE_SHUFFLE_BIT) != 0;
  info.subgroup_vote =
      compute && (subgroup.supportedOperations & VK_SUBGROUP_FEATURE_VOTE_BIT) != 0;
  VkPhysicalDeviceShaderFloat16Int8Features float16{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES};
  VkPhysicalDevice16BitStorageFeatures storage16{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES};
  storage16.pNext = &float16;
  VkPhysicalDeviceFeatures2 features{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
  features.pNext = &storage16;
  vkGetPhysicalDeviceFeatures2(device, &features);
  info.shader_float16 = float16.shaderFloat16 == VK_TRUE;
  info.storage_buffer_16bit = storage16.storageBuffer16BitAccess == VK_TRUE;
  VkPhysicalDeviceMemoryProperties memory;
  vkGetPhysicalDeviceMemoryProperties(device, &memory);
  for (uint32_t h = 0; h < memory.memoryHeapCount; ++h) {
    VulkanHeap heap;
    heap.size = memory.memoryHeaps[h].size;
    heap.device_local = memory.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT;
    for (uint32_t t = 0; t < memory.memoryTypeCount; ++t) {
      if (memory.memoryTypes[t].heapIndex != h) continue;
      const VkMemoryPropertyFlags flags = memory.memoryTypes[t].propertyFlags;
      if (flags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) heap.host_visible = true;
      if ((flags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) &&
          (flags & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT)) {
        heap.device_local_host_visible = true;
      }
    }
    info.heaps.push_back(heap);
  }
  info.nv_cooperative_matrix = HasExtension(device, VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME);
  if (info.nv_cooperative_matrix) {
    auto get = reinterpret_cast<PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV>(
        vkGetInstanceProcAddr(instance, "vkGetPhysicalDeviceCooperativeMatrixPropertiesNV"));
    uint32_t count = 0;
    if (get != nullptr && get(device, &count, nullptr) == VK_SUCCESS) {
      std::vector<VkCooperativeMatrixPropertiesNV> shapes(
          count, {VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_NV});
      get(device, &count, shapes.data());
      for (const auto& p : shapes) {
        info.cooperative_matrix_shapes.push_back(absl::StrFormat(
            "%ux%ux%u %s·%s+%s→%s%s", p.MSize, p.NSize, p.KSize, ComponentName(p.AType),
            ComponentName(p.BType), ComponentName(p.CType), ComponentName(p.DType),
            p.scope == VK_SCOPE_SUBGROUP_NV ? "" : " (not subgroup scope)"));
      }
      if (coop_properties != nullptr) *coop_properties = shapes;
    }
  }
  return info;
}

absl::StatusOr<std::vector<VulkanDeviceInfo>> ListVulkanDevices() {
  FSDPD_ASSIGN_OR_RETURN(std::unique_ptr<Instance> instance, CreateInstance(false));
  FSDPD_ASSIGN_OR_RETURN(std::vector<VkPhysicalDevice> devices,
                         PhysicalDevices(instance->instance));
  std::vector<VulkanDeviceInfo> infos;
  for (size_t i = 0; i < devices.size(); ++i) {
    infos.push_back(DescribeDevice(instance->instance, devices[i], static_cast<int>(i), nullptr));
  }
  return infos;
}

}  // namespace fsdpd::edge
