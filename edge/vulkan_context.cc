#include "edge/vulkan_context.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"

namespace fsdpd::edge {
namespace {

// The descriptor pool's sets; kept sets fill it up to this, then all are dropped at once.
constexpr uint32_t kMaxSets = 1024;
// Commands a command buffer holds before Finish submits it, with op times on.
constexpr uint32_t kMaxTimedCommands = 2048;

}  // namespace

absl::StatusOr<std::unique_ptr<VulkanContext>> VulkanContext::Create(const VulkanOptions& options) {
  std::unique_ptr<VulkanContext> context(new VulkanContext());
  FSDPD_RETURN_IF_ERROR(context->Open(options));
  return context;
}

VulkanBuffer::~VulkanBuffer() {
  if (context != nullptr) context->Release(buffer, memory, std::move(charge));
}

void VulkanContext::Release(VkBuffer buffer, VkDeviceMemory memory, ByteLedger::Charge charge) {
  released_.push_back({buffer, memory, std::move(charge)});
  const bool pending = recording_ || std::any_of(batches_.begin(), batches_.end(),
                                                 [](const Batch& batch) { return batch.pending; });
  if (!pending) DestroyReleased();
}

void VulkanContext::DestroyReleased() {
  for (Released& released : released_) {
    if (released.buffer != VK_NULL_HANDLE) vkDestroyBuffer(device_, released.buffer, nullptr);
    if (released.memory != VK_NULL_HANDLE) vkFreeMemory(device_, released.memory, nullptr);
  }
  released_.clear();  // and with them their charges
}

VulkanContext::~VulkanContext() {
  if (device_ == VK_NULL_HANDLE) return;
  vkDeviceWaitIdle(device_);
  DestroyReleased();
  timer_.reset();
  for (Batch& batch : batches_) {
    if (batch.fence != VK_NULL_HANDLE) vkDestroyFence(device_, batch.fence, nullptr);
  }
  if (descriptor_pool_ != VK_NULL_HANDLE) {
    vkDestroyDescriptorPool(device_, descriptor_pool_, nullptr);
  }
  if (command_pool_ != VK_NULL_HANDLE) vkDestroyCommandPool(device_, command_pool_, nullptr);
  vkDestroyDevice(device_, nullptr);
}

int VulkanContext::validation_errors() const {
  std::lock_guard<std::mutex> lock(instance_->mutex);
  return instance_->errors;
}

std::string VulkanContext::last_validation_error() const {
  std::lock_guard<std::mutex> lock(instance_->mutex);
  return instance_->last_error;
}

absl::Status VulkanContext::Open(const VulkanOptions& options) {
  FSDPD_ASSIGN_OR_RETURN(instance_, CreateInstance(options.validation));
  FSDPD_ASSIGN_OR_RETURN(std::vector<VkPhysicalDevice> devices,
                         PhysicalDevices(instance_->instance));
  if (options.device < 0 || options.device >= static_cast<int>(devices.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("--device ", options.device, ": there are ", devices.size(),
                     " Vulkan device(s), numbered from 0 (see `fsdpd-edge devices`)"));
  }
  physical_ = devices[static_cast<size_t>(options.device)];
  std::vector<VkCooperativeMatrixPropertiesNV> coop;
  info_ = DescribeDevice(instance_->instance, physical_, options.device, &coop);
  VkPhysicalDeviceProperties properties;
  vkGetPhysicalDeviceProperties(physical_, &properties);
  limits_ = properties.limits;
  if (properties.apiVersion < VK_API_VERSION_1_1) {
    return absl::FailedPreconditionError(absl::StrCat("device '", info_.name, "' supports Vulkan ",
                                                      info_.api_version, "; fsdpd-edge needs 1.1"));
  }
  // attention.comp: 4 invocations per query sum their partial scores by subgroup shuffles.
  if (!info_.subgroup_shuffle || info_.subgroup_size % kAttentionLanesPerQuery != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("device '", info_.name, "' has ",
                     !info_.subgroup_shuffle ? "no subgroup shuffle in compute shaders"
                                             : absl::StrCat("subgroups of ", info_.subgroup_size),
                     "; fsdpd-edge's attention shader needs subgroup shuffles within groups of ",
                     kAttentionLanesPerQuery, " invocations"));
  }
  const bool fp16_capable = info_.shader_float16 && info_.storage_buffer_16bit;
  if (options.precision == VulkanOptions::Precision::kFp16 && !fp16_capable) {
    return absl::FailedPreconditionError(
        absl::StrCat("--precision fp16: device '", info_.name, "' lacks ",
                     !info_.shader_float16 ? "shaderFloat16" : "storageBuffer16BitAccess",
                     " (VK_KHR_shader_float16_int8 / VK_KHR_16bit_storage); use --precision fp32"));
  }
  fp16_ = fp16_capable && options.precision != VulkanOptions::Precision::kFp32;
  // matmul_coop.comp also declares the Vulkan memory model (GL_KHR_memory_scope_semantics,
  // which gl_ScopeSubgroup needs), so the device must offer that feature too.
  bool coop_features_present = false;
  if (info_.nv_cooperative_matrix &&
      HasExtension(physical_, VK_KHR_VULKAN_MEMORY_MODEL_EXTENSION_NAME)) {
    VkPhysicalDeviceVulkanMemoryModelFeaturesKHR memory_model{
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES_KHR};
    VkPhysicalDeviceCooperativeMatrixFeaturesNV coop_query{
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV};
    coop_query.pNext = &memory_model;
    VkPhysicalDeviceFeatures2 query{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    query.pNext = &coop_query;
    vkGetPhysicalDeviceFeatures2(physical_, &query);
    coop_features_present = coop_query.cooperativeMatrix && memory_model.vulkanMemoryModel;
  }
  coop_ = fp16_ && options.cooperative_matrix && coop_features_present &&
          info_.subgroup_size == 32 && std::any_of(coop.begin(), coop.end(), IsCoopShape);
  // matmul_cm2.comp: workgroup-scope matrices with tensor addressing, per-element operations
  // and type conversions, in SPIR-V 1.6 (a Vulkan 1.3 instance and device).
  CoopMatrixFeaturesKhr khr_query;
  CoopMatrix2FeaturesNv cm2_query;
  if (coop_ && instance_->api_version >= VK_API_VERSION_1_3 &&
      properties.apiVersion >= VK_API_VERSION_1_3 &&
      HasExtension(physical_, kKhrCooperativeMatrix) &&
      HasExtension(physical_, kNvCooperativeMatrix2)) {
    khr_query.pNext = &cm2_query;
    VkPhysicalDeviceFeatures2 query{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    query.pNext = &khr_query;
    vkGetPhysicalDeviceFeatures2(physical_, &query);
    cm2_ = khr_query.cooperativeMatrix && cm2_query.workgroupScope &&
           cm2_query.flexibleDimensions && cm2_query.conversions &&
           cm2_query.perElementOperations && cm2_query.tensorAddressing;
  }

  uint32_t family_count = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(physical_, &family_count, nullptr);
  std::vector<VkQueueFamilyProperties> families(family_count);
  vkGetPhysicalDeviceQueueFamilyProperties(physical_, &family_count, families.data());
  queue_family_ = UINT32_MAX;
  for (uint32_t f = 0; f < family_count; ++f) {
    if (families[f].queueFlags & VK_QUEUE_COMPUTE_BIT) {
      queue_family_ = f;
      break;
    }
  }
  if (queue_family_ == UINT32_MAX) {
    return absl::FailedPreconditionError(
        absl::StrCat("device '", info_.name, "' has no compute queue"));
  }
  const float priority = 1.0f;
  VkDeviceQueueCreateInfo queue_info{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
  queue_info.queueFamilyIndex = queue_family_;
  queue_info.queueCount = 1;
  queue_info.pQueuePriorities = &priority;
  VkPhysicalDeviceCooperativeMatrixFeaturesNV coop_features{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV};
  coop_features.cooperativeMatrix = VK_TRUE;
  VkPhysicalDeviceShaderFloat16Int8Features float16{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES};
  float16.shaderFloat16 = VK_TRUE;
  VkPhysicalDevice16BitStorageFeatures storage16{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES};
  storage16.storageBuffer16BitAccess = VK_TRUE;
  storage16.pNext = &float16;
  VkPhysicalDeviceVulkanMemoryModelFeaturesKHR memory_model{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES_KHR};
  memory_model.vulkanMemoryModel = VK_TRUE;
  coop_features.pNext = &memory_model;
  if (coop_) float16.pNext = &coop_features;
  CoopMatrixFeaturesKhr khr_features;
  khr_features.cooperativeMatrix = VK_TRUE;
  CoopMatrix2FeaturesNv cm2_features;
  cm2_features.workgroupScope = cm2_features.flexibleDimensions = VK_TRUE;
  cm2_features.conversions = cm2_features.perElementOperations = VK_TRUE;
  cm2_features.tensorAddressing = VK_TRUE;
  std::vector<const char*> extensions;
  if (coop_) {
    extensions.push_back(VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME);
    extensions.push_back(VK_KHR_VULKAN_MEMORY_MODEL_EXTENSION_NAME);
  }
  if (cm2_) {
    extensions.push_back(kKhrCooperativeMatrix);
    extensions.push_back(kNvCooperativeMatrix2);
    memory_model.pNext = &khr_features;
    khr_features.pNext = &cm2_features;
  }
  VkDeviceCreateInfo device_info{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
  device_info.pNext = fp16_ ? &storage16 : nullptr;
  VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR executable_features{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR};
  if (options.pipeline_statistics &&
      HasExtension(physical_, VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME)) {
    VkPhysicalDeviceFeatures2 query{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    query.pNext = &executable_features;
    vkGetPhysicalDeviceFeatures2(physical_, &query);
    statistics_ = executable_features.pipelineExecutableInfo == VK_TRUE;
  }
  if (statistics_) {
    extensions.push_back(VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME);
    executable_features.pNext = const_cast<void*>(device_info.pNext);
    device_info.pNext = &executable_features;
  }
  device_info.queueCreateInfoCount = 1;
  device_info.pQueueCreateInfos = &queue_info;
  device_info.enabledExtensionCount = static_cast<uint32_t>(extensions.size());
  device_info.ppEnabledExtensionNames = extensions.data();
  VK_RETURN_IF_ERROR(vkCreateDevice(physical_, &device_info, nullptr, &device_));
  vkGetDeviceQueue(device_, queue_family_, 0, &queue_);
  vkGetPhysicalDeviceMemoryProperties(physical_, &memory_);

  VkCommandPoolCreateInfo pool_info{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  pool_info.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pool_info.queueFamilyIndex = queue_family_;
  VK_RETURN_IF_ERROR(vkCreateCommandPool(device_, &pool_info, nullptr, &command_pool_));
  VkCommandBufferAllocateInfo allocate{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  allocate.commandPool = command_pool_;
  allocate.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  allocate.commandBufferCount = 1;
  VkFenceCreateInfo fence_info{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  for (Batch& batch : batches_) {
    VK_RETURN_IF_ERROR(vkAllocateCommandBuffers(device_, &allocate, &batch.commands));
    VK_RETURN_IF_ERROR(vkCreateFence(device_, &fence_info, nullptr, &batch.fence));
  }
  commands_ = batches_[0].commands;
  // Early submits are off while the op timer runs: its timestamps are read per command buffer.
  submit_every_ = options.op_times ? 0 : std::max(options.submit_every, 0);
  cache_sets_ = options.cache_descriptor_sets;
  map_device_local_ = !options.force_staging;
  VkDescriptorPoolSize size{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, kMaxSets * kMaxBindings};
  VkDescriptorPoolCreateInfo descriptor_info{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
  descriptor_info.maxSets = kMaxSets;
  descriptor_info.poolSizeCount = 1;
  descriptor_info.pPoolSizes = &size;
  VK_RETURN_IF_ERROR(vkCreateDescriptorPool(device_, &descriptor_info, nullptr, &descriptor_pool_));
  if (options.op_times) {
    FSDPD_ASSIGN_OR_RETURN(timer_,
                           OpTimer::Create(device_, families[queue_family_].timestampValidBits,
                                           limits_.timestampPeriod, kMaxTimedCommands, info_.name));
  }
  zero_copy_type_ = FindMemoryType(UINT32_MAX, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT |
                                                   VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT |
                                                   VK_MEMORY_PROPERTY_HOST_COHERENT_BIT);
  return absl::OkStatus();
}

uint32_t VulkanContext::FindMemoryType(uint32_t type_bits, VkMemoryPropertyFlags required) const {
  for (uint32_t t = 0; t < memory_.memoryTypeCount; ++t) {
    if ((type_bits & (1u << t)) && (memory_.memoryTypes[t].propertyFlags & required) == required) {
      return t;
    }
  }
  return UINT32_MAX;
}

absl::StatusOr<std::unique_ptr<VulkanBuffer>> VulkanContext::CreateBuffer(VkDeviceSize bytes,
                                                                          bool host_visible,
                                                                          uint32_t memory_type) {
  if (bytes == 0) bytes = 4;
  if (bytes > limits_.maxStorageBufferRange) {
    return absl::InvalidArgumentError(absl::StrCat("a tensor of ", bytes, " bytes exceeds device '",
                                                   info_.name, "''s maxStorageBufferRange of ",
                                                   limits_.maxStorageBufferRange,
                                                   " bytes; use a smaller batch or sequence"));
  }
  auto buffer = std::make_unique<VulkanBuffer>();
  buffer->context = this;
  buffer->id = next_buffer_id_++;
  buffer->bytes = bytes;
  VkBufferCreateInfo info{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  info.size = bytes;
  info.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
               VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  info.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  VK_RETURN_IF_ERROR(vkCreateBuffer(device_, &info, nullptr, &buffer->buffer));
  VkMemoryRequirements requirements;
  vkGetBufferMemoryRequirements(device_, buffer->buffer, &requirements);
  uint32_t type = memory_type;
  if (type == UINT32_MAX || !(requirements.memoryTypeBits & (1u << type))) {
    const VkMemoryPropertyFlags host =
        VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    type = host_visible
               ? FindMemoryType(requirements.memoryTypeBits, host)
               : FindMemoryType(requirements.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
    if (type == UINT32_MAX) type = FindMemoryType(requirements.memoryTypeBits, 0);
  }
  if (type == UINT32_MAX) {
    return absl::InternalError(
        absl::StrCat("device '", info_.name, "' has no memory type for a ", bytes, "-byte buffer"));
  }
  VkMemoryAllocateInfo allocate{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
  allocate.allocationSize = requirements.size;
  allocate.memoryTypeIndex = type;
  const VkResult allocated = vkAllocateMemory(device_, &allocate, nullptr, &buffer->memory);
  if (allocated != VK_SUCCESS) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", requirements.size,
                                                     " bytes on device '", info_.name,
                                                     "': ", ResultName(allocated)));
  }
  VK_RETURN_IF_ERROR(vkBindBufferMemory(device_, buffer->buffer, buffer->memory, 0));
  buffer->charge = allocated_.Take(static_cast<int64_t>(requirements.size));
  if ((host_visible || map_device_local_) &&
      (memory_.memoryTypes[type].propertyFlags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT)) {
    VK_RETURN_IF_ERROR(vkMapMemory(device_, buffer->memory, 0, VK_WHOLE_SIZE, 0, &buffer->mapped));
  }
  return buffer;
}

absl::Status VulkanContext::CopyNow(VulkanBuffer& from, VulkanBuffer& to, VkDeviceSize bytes) {
  FSDPD_RETURN_IF_ERROR(RecordCopy(from, 0, to, 0, bytes));
  return Finish();
}

absl::Status VulkanContext::Submit(bool wait) {
  Batch& batch = batches_[current_];
  VK_RETURN_IF_ERROR(vkEndCommandBuffer(batch.commands));
  recording_ = false;
  recorded_ = 0;
  VkSubmitInfo submit{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  submit.commandBufferCount = 1;
  submit.pCommandBuffers = &batch.commands;
  VK_RETURN_IF_ERROR(vkQueueSubmit(queue_, 1, &submit, batch.fence));
  batch.pending = true;
  // The next batch; one still pending (every batch submitted early, none waited for) is waited
  // for before it is recorded again.
  const size_t next = wait ? 0 : (current_ + 1) % kBatches;
  for (size_t i = 0; i < kBatches; ++i) {
    Batch& done = batches_[(current_ + 1 + i) % kBatches];  // oldest first
    if (!done.pending || (!wait && &done != &batches_[next])) continue;
    VK_RETURN_IF_ERROR(vkWaitForFences(device_, 1, &done.fence, VK_TRUE, UINT64_MAX));
    VK_RETURN_IF_ERROR(vkResetFences(device_, 1, &done.fence));
    VK_RETURN_IF_ERROR(vkResetCommandBuffer(done.commands, 0));
    done.pending = false;
  }
  current_ = next;
  commands_ = batches_[current_].commands;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<VulkanBuffer>> VulkanContext::CreateFilledBuffer(const void* source,
                                                                                VkDeviceSize bytes,
                                                                                bool zero_copy) {
  if (zero_copy && zero_copy_type_ != UINT32_MAX) {
    FSDPD_ASSIGN_OR_RETURN(std::unique_ptr<VulkanBuffer> buffer,
                           CreateBuffer(bytes, /*host_visible=*/true, zero_copy_type_));
    std::memcpy(buffer->mapped, source, bytes);
    return buffer;
  }
  FSDPD_ASSIGN_OR_RETURN(std::unique_ptr<VulkanBuffer> buffer, CreateBuffer(bytes, false));
  FSDPD_ASSIGN_OR_RETURN(std::unique_ptr<VulkanBuffer> staging, CreateBuffer(bytes, true));
  std::memcpy(staging->mapped, source, bytes);
  FSDPD_RETURN_IF_ERROR(CopyNow(*staging, *buffer, bytes));
  return buffer;
}

absl::Status VulkanContext::BeginRecording() {
  if (recording_) return absl::OkStatus();
  VkCommandBufferBeginInfo begin{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  begin.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  VK_RETURN_IF_ERROR(vkBeginCommandBuffer(commands_, &begin));
  recording_ = true;
  if (timer_ != nullptr) timer_->Begin(commands_);
  return absl::OkStatus();
}

absl::Status VulkanContext::MakeRoom() {
  if (timer_ != nullptr && timer_->full()) FSDPD_RETURN_IF_ERROR(Finish());
  // The device runs the batch while the host records the next: decoding records ~75 commands
  // a token, and the device idled while the host recorded all of them (bench/RESULTS.md).
  if (recording_ && submit_every_ > 0 && recorded_ >= submit_every_) {
    FSDPD_RETURN_IF_ERROR(Submit(/*wait=*/false));
  }
  FSDPD_RETURN_IF_ERROR(BeginRecording());
  ++recorded_;
  return absl::OkStatus();
}

absl::Status VulkanContext::ResetDescriptorSets() {
  VK_RETURN_IF_ERROR(vkResetDescriptorPool(device_, descriptor_pool_, 0));
  sets_.clear();
  sets_allocated_ = 0;
  return absl::OkStatus();
}

absl::StatusOr<VkDescriptorSet> VulkanContext::DescriptorSet(
    const Pipeline& pipeline, std::initializer_list<Buffer*> buffers) {
  SetKey key{pipeline.set_layout, {}};
  uint32_t b = 0;
  for (Buffer* buffer : buffers) key.second[b++] = Vk(*buffer).id;
  if (cache_sets_) {
    auto kept = sets_.find(key);
    if (kept != sets_.end()) return kept->second;
  }
  const HostSpan span(timer_.get(), "writing descriptor sets");
  if (sets_allocated_ == kMaxSets) {
    // The sets in the recorded commands stay in use until they have run.
    FSDPD_RETURN_IF_ERROR(Finish());
    FSDPD_RETURN_IF_ERROR(ResetDescriptorSets());
    FSDPD_RETURN_IF_ERROR(BeginRecording());
  }
  VkDescriptorSetAllocateInfo allocate{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
  allocate.descriptorPool = descriptor_pool_;
  allocate.descriptorSetCount = 1;
  allocate.pSetLayouts = &pipeline.set_layout;
  VkDescriptorSet set;
  VK_RETURN_IF_ERROR(vkAllocateDescriptorSets(device_, &allocate, &set));
  ++sets_allocated_;
  ++sets_written_;
  VkDescriptorBufferInfo infos[kMaxBindings];
  VkWriteDescriptorSet writes[kMaxBindings];
  b = 0;
  for (Buffer* buffer : buffers) {
    infos[b] = {Vk(*buffer).buffer, 0, VK_WHOLE_SIZE};
    writes[b] = {VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
    writes[b].dstSet = set;
    writes[b].dstBinding = b;
    writes[b].descriptorCount = 1;
    writes[b].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    writes[b].pBufferInfo = &infos[b];
    ++b;
  }
  vkUpdateDescriptorSets(device_, b, writes, 0, nullptr);
  if (cache_sets_) sets_.emplace(key, set);
  return set;
}

absl::Status VulkanContext::Dispatch(const Pipeline& pipeline,
                                     std::initializer_list<Buffer*> buffers, const void* push,
                                     uint32_t x_groups, uint32_t y_groups) {
  if (buffers.size() > kMaxBindings) {
    return absl::InternalError(absl::StrCat(pipeline.name, ": ", buffers.size(),
                                            " buffers bound, at most ", kMaxBindings));
  }
  const HostSpan span(timer_.get(), "recording commands");
  FSDPD_RETURN_IF_ERROR(MakeRoom());
  FSDPD_ASSIGN_OR_RETURN(VkDescriptorSet set, DescriptorSet(pipeline, buffers));
  vkCmdBindPipeline(commands_, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline.pipeline);
  vkCmdBindDescriptorSets(commands_, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline.layout, 0, 1, &set, 0,
                          nullptr);
  vkCmdPushConstants(commands_, pipeline.layout, VK_SHADER_STAGE_COMPUTE_BIT, 0,
                     pipeline.push_bytes, push);
  vkCmdDispatch(commands_, x_groups, y_groups, 1);
  // Each op reads what the one before wrote. The host reads only after Finish, whose own
  // barrier makes every write visible to it: a host stage here made NVIDIA's driver flush for
  // the host after every dispatch (bench/RESULTS.md).
  VkMemoryBarrier barrier{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  barrier.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
  barrier.dstAccessMask =
      VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT;
  vkCmdPipelineBarrier(commands_, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                       VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1,
                       &barrier, 0, nullptr, 0, nullptr);
  if (timer_ != nullptr) timer_->Stamp(commands_, pipeline.name);
  return absl::OkStatus();
}

absl::Status VulkanContext::Finish() {
  if (!recording_) return absl::OkStatus();
  recording_ = false;
  // Everything the submit wrote, visible to the host once the fence is waited for: once a
  // submit, not after every command.
  VkMemoryBarrier barrier{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  barrier.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  barrier.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
  vkCmdPipelineBarrier(commands_,
                       VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                       VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &barrier, 0, nullptr, 0, nullptr);
  {
    const HostSpan span(timer_.get(), "submitting and waiting");
    FSDPD_RETURN_IF_ERROR(Submit(/*wait=*/true));
  }
  DestroyReleased();
  // Without kept sets, each submit's are dropped once it has run.
  if (!cache_sets_) FSDPD_RETURN_IF_ERROR(ResetDescriptorSets());
  if (timer_ != nullptr) FSDPD_RETURN_IF_ERROR(timer_->Collect());
  return absl::OkStatus();
}

std::vector<OpTime> VulkanContext::op_times() const {
  return timer_ != nullptr ? timer_->Totals() : std::vector<OpTime>{};
}

std::vector<OpTime> VulkanContext::host_times() const {
  return timer_ != nullptr ? timer_->HostTotals() : std::vector<OpTime>{};
}

void VulkanContext::ResetOpTimes() {
  if (timer_ != nullptr) timer_->Reset();
}

absl::Status VulkanContext::CheckRoom(double bytes) const {
  double heap = 0.0;
  for (const VulkanHeap& candidate : info_.heaps) {
    if (candidate.device_local) heap = std::max(heap, static_cast<double>(candidate.size));
  }
  const double allocated = static_cast<double>(allocated_.held());
  if (heap <= 0.0 || allocated + bytes <= heap) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "cannot allocate ", absl::StrFormat("%.3g", bytes / (1 << 30)), " GiB on device '",
      info_.name, "' beside the ", absl::StrFormat("%.3g", allocated / (1 << 30)),
      " GiB allocated (its largest device-local heap holds ",
      absl::StrFormat("%.3g", heap / (1 << 30)), " GiB); use a smaller batch or sequence"));
}

absl::Status VulkanContext::RecordCopy(VulkanBuffer& from, VkDeviceSize from_offset,
                                       VulkanBuffer& to, VkDeviceSize to_offset,
                                       VkDeviceSize bytes) {
  const HostSpan span(timer_.get(), "recording commands");
  FSDPD_RETURN_IF_ERROR(MakeRoom());
  const VkBufferCopy region{from_offset, to_offset, bytes};
  vkCmdCopyBuffer(commands_, from.buffer, to.buffer, 1, &region);
  // Dispatch's barrier covers the copy's read of what a shader before it wrote; this one, the
  // later commands' use of what it wrote.
  VkMemoryBarrier barrier{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  barrier.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
  barrier.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                          VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  vkCmdPipelineBarrier(commands_, VK_PIPELINE_STAGE_TRANSFER_BIT,
                       VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1,
                       &barrier, 0, nullptr, 0, nullptr);
  if (timer_ != nullptr) timer_->Stamp(commands_, "copy");
  return absl::OkStatus();
}

}  // namespace fsdpd::edge
