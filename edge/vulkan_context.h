// One Vulkan device opened for the edge backend's compute (edge/vulkan_backend.cc): the device
// with the features the shaders need, one compute queue, one command buffer recorded between
// Finish calls with a barrier after every command, descriptor sets written once for each
// (pipeline, buffers) pair and kept, buffers and pipelines. Which pipelines exist is
// edge/vulkan_pipelines.cc's business and which one runs an op the backend's; this layer knows
// shaders only as variants to build (SPIR-V and layout, edge/shader_variant.h). The bench's
// probes (bench/edge_probes.h) use it directly. Internal to edge/ and bench/.
#pragma once

#include <vulkan/vulkan.h>

#include <array>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "edge/backend.h"
#include "edge/byte_ledger.h"
#include "edge/op_timer.h"
#include "edge/shader_variant.h"
#include "edge/vulkan_backend.h"
#include "edge/vulkan_device.h"

namespace fsdpd::edge {

struct Pipeline {
  VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
  VkPipelineLayout layout = VK_NULL_HANDLE;
  VkPipeline pipeline = VK_NULL_HANDLE;
  uint32_t bindings = 0;
  uint32_t push_bytes = 0;
  const char* name = "";  // its shader's (ShaderVariant::name), for op times
};

class VulkanContext;

struct VulkanBuffer : Buffer {
  VulkanContext* context = nullptr;  // which releases it (VulkanContext::Release)
  VkBuffer buffer = VK_NULL_HANDLE;
  VkDeviceMemory memory = VK_NULL_HANDLE;
  VkDeviceSize bytes = 0;
  uint64_t id = 0;            // unique in its context, never reused: descriptor sets are kept by it
  void* mapped = nullptr;     // host-visible memory stays mapped
  bool half = false;          // fp16 elements: a matmul's x from MatmulInput
  ByteLedger::Charge charge;  // its memory's bytes, on the context's ledger
  // int8 weights (Backend::Int8Weight) of [int8_rows, int8_cols]; 0 for every other buffer.
  int64_t int8_rows = 0;
  int64_t int8_cols = 0;
  ~VulkanBuffer() override;  // hands the buffer, its memory and charge to context->Release
};

inline VulkanBuffer& Vk(Buffer& buffer) { return static_cast<VulkanBuffer&>(buffer); }

class VulkanContext {
 public:
  // Opens options.device: Vulkan 1.1 or newer with subgroup shuffles in groups of
  // kAttentionLanesPerQuery (attention.comp), fp16 where the device has shaderFloat16 and
  // storageBuffer16BitAccess unless options.precision says fp32 (fp16 asked of a device without
  // them is an error), the NV cooperative-matrix extension where options.cooperative_matrix,
  // fp16 and the device's 16×16×16 shape allow it, and workgroup-scope matrices
  // (VK_NV_cooperative_matrix2) where that device also offers them on Vulkan 1.3.
  static absl::StatusOr<std::unique_ptr<VulkanContext>> Create(const VulkanOptions& options);
  ~VulkanContext();  // after every buffer and pipeline made here is gone
  VulkanContext(const VulkanContext&) = delete;
  VulkanContext& operator=(const VulkanContext&) = delete;

  const VulkanDeviceInfo& info() const { return info_; }
  const VkPhysicalDeviceLimits& limits() const { return limits_; }
  bool fp16() const { return fp16_; }
  bool coop() const { return coop_; }  // the NV cooperative-matrix extension is enabled
  bool cm2() const { return cm2_; }    // and workgroup-scope matrices
  int validation_errors() const;
  std::string last_validation_error() const;

  // A memory type both device-local and host-visible (zero-copy weights), or UINT32_MAX.
  uint32_t zero_copy_memory_type() const { return zero_copy_type_; }
  // A buffer of `bytes` in `memory_type` where given and allowed, else host-visible (mapped) or
  // device-local memory. Larger than maxStorageBufferRange, or no room: an error saying so.
  absl::StatusOr<std::unique_ptr<VulkanBuffer>> CreateBuffer(VkDeviceSize bytes, bool host_visible,
                                                             uint32_t memory_type = UINT32_MAX);
  // A device-local buffer holding `bytes` of `source`: written through a mapping into the
  // zero-copy memory type where `zero_copy` and the device has one, else uploaded from a staging
  // buffer (CopyNow).
  absl::StatusOr<std::unique_ptr<VulkanBuffer>> CreateFilledBuffer(const void* source,
                                                                   VkDeviceSize bytes,
                                                                   bool zero_copy);
  // from → to, bytes from offset 0, now: the copy is recorded after what is recorded and one
  // submit runs them all, waited for (uploads through staging, reads of device-local memory;
  // decoding reads its logits so every token, and a submit of its own cost another wait).
  absl::Status CopyNow(VulkanBuffer& from, VulkanBuffer& to, VkDeviceSize bytes);
  // Whether `bytes` more fit beside the buffers allocated here in the device's largest
  // device-local heap: RESOURCE_EXHAUSTED naming the sizes where they cannot (Backend::CheckRoom).
  absl::Status CheckRoom(double bytes) const;

  // `shader`'s pipeline, with its layout: shader.bindings storage buffers, shader.push_bytes of
  // push constants. A variant this build could not compile is refused saying so. A failed one
  // leaves *out for DestroyPipeline. (edge/vulkan_context_pipelines.cc, as the rest of the
  // pipelines' calls.)
  absl::Status MakePipeline(const ShaderVariant& shader, Pipeline* out);
  // Several pipelines at once, on up to `threads` threads (0: one per core): the driver compiles
  // each shader when its pipeline is made, which for the cooperative-matrix blocks took the
  // H200's driver minutes one after another on a cold start. Each request gets its own status,
  // in order; a failed one leaves its Pipeline for DestroyPipeline as MakePipeline does.
  struct PipelineRequest {
    const ShaderVariant* shader;
    Pipeline* out;
  };
  std::vector<absl::Status> MakePipelines(const std::vector<PipelineRequest>& requests,
                                          int threads);
  void DestroyPipeline(Pipeline* pipeline);
  // The driver's statistics of a pipeline built here ("Register Count 168, …"), where
  // options.pipeline_statistics asked for them and the device offers
  // VK_KHR_pipeline_executable_properties; Unavailable, saying which, otherwise.
  absl::StatusOr<std::string> Statistics(const Pipeline& pipeline) const;

  // Records a dispatch of `pipeline` over `buffers` (bound 0, 1, …) with push_bytes of `push`,
  // then a barrier: every later command sees what it wrote. The descriptor set that binds the
  // buffers is written the first time the pair is dispatched and kept for the next (decoding
  // runs the same ~75 dispatches over the same buffers every token).
  // With options.cache_descriptor_sets off, a set is written for every dispatch instead.
  absl::Status Dispatch(const Pipeline& pipeline, std::initializer_list<Buffer*> buffers,
                        const void* push, uint32_t x_groups, uint32_t y_groups);
  // Records a copy of `bytes` between buffer offsets, then a barrier as Dispatch does.
  absl::Status RecordCopy(VulkanBuffer& from, VkDeviceSize from_offset, VulkanBuffer& to,
                          VkDeviceSize to_offset, VkDeviceSize bytes);
  // Submits what is recorded and waits for it, and for every batch submitted before it; then
  // destroys the buffers released while commands were pending.
  absl::Status Finish();
  // Destroys a buffer, frees its memory and returns its bytes to the ledger once no command
  // that uses it can still run: at once where nothing is recorded or in flight, else at the
  // next Finish (or when the context closes). Destroying a buffer a pending command reads is
  // undefined in Vulkan: on lavapipe it corrupted the process's heap (edge_bench freed an
  // operand whose recorded Add had not been submitted). ~VulkanBuffer calls it.
  void Release(VkBuffer buffer, VkDeviceMemory memory, ByteLedger::Charge charge);
  // Descriptor sets written so far (each a vkAllocateDescriptorSets and a vkUpdateDescriptorSets).
  int64_t descriptor_sets_written() const { return sets_written_; }
  // The GPU time of each operation Finish has seen run (options.op_times); empty otherwise.
  std::vector<OpTime> op_times() const;
  std::vector<OpTime> host_times() const;  // VulkanBackend::host_times
  void ResetOpTimes();

  static constexpr uint32_t kMaxBindings = 5;
  static constexpr uint32_t kAttentionLanesPerQuery = 4;  // attention.comp's PARTS

 private:
  VulkanContext() = default;
  absl::Status Open(const VulkanOptions& options);
  uint32_t FindMemoryType(uint32_t type_bits, VkMemoryPropertyFlags required) const;
  absl::Status BeginRecording();
  // Submits the batch being recorded (its fence signals when it has run); with `wait`, waits for
  // it and every batch before it, and resets them all.
  absl::Status Submit(bool wait);
  // Before another command: submits what is recorded where the op timer's table is full, or,
  // without waiting, where options.submit_every commands are recorded since the last submit.
  absl::Status MakeRoom();
  // The set binding `buffers` for `pipeline`: kept from an earlier dispatch, or written now.
  // Where the pool is full, what is recorded is submitted and waited for first, then every kept
  // set is dropped.
  absl::StatusOr<VkDescriptorSet> DescriptorSet(const Pipeline& pipeline,
                                                std::initializer_list<Buffer*> buffers);
  absl::Status ResetDescriptorSets();  // nothing recorded may use them

  std::unique_ptr<Instance> instance_;
  VkPhysicalDevice physical_ = VK_NULL_HANDLE;
  VulkanDeviceInfo info_;
  VkPhysicalDeviceLimits limits_{};
  VkPhysicalDeviceMemoryProperties memory_{};
  VkDevice device_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  uint32_t queue_family_ = 0;
  VkCommandPool command_pool_ = VK_NULL_HANDLE;
  // Batches of commands, a command buffer and a fence each, used in turn: commands_ records into
  // batches_[current_]; a batch submitted early stays pending until Finish (or until its turn
  // comes round again) waits for its fence. Submission order and every command's barrier keep
  // the batches in order on the queue.
  static constexpr size_t kBatches = 8;
  struct Batch {
    VkCommandBuffer commands = VK_NULL_HANDLE;
    VkFence fence = VK_NULL_HANDLE;
    bool pending = false;
  };
  std::array<Batch, kBatches> batches_;
  size_t current_ = 0;
  VkCommandBuffer commands_ = VK_NULL_HANDLE;  // batches_[current_].commands
  int submit_every_ = 0;                       // options.submit_every
  int recorded_ = 0;                           // commands in the batch being recorded
  VkDescriptorPool descriptor_pool_ = VK_NULL_HANDLE;
  // Kept sets by (set layout, the bound buffers' ids; 0 past the last binding).
  using SetKey = std::pair<VkDescriptorSetLayout, std::array<uint64_t, kMaxBindings>>;
  std::map<SetKey, VkDescriptorSet> sets_;
  uint32_t sets_allocated_ = 0;  // from the pool since its last reset
  int64_t sets_written_ = 0;
  bool cache_sets_ = true;
  // Whether a buffer asked for without host_visible is mapped where its memory happens to be
  // host-visible (lavapipe, resizable BAR); not with options.force_staging, so that such a
  // device runs a discrete GPU's path: activations read and written through staging.
  bool map_device_local_ = true;
  uint64_t next_buffer_id_ = 1;
  // Buffers released while commands were pending (Release), destroyed after the next wait.
  struct Released {
    VkBuffer buffer;
    VkDeviceMemory memory;
    ByteLedger::Charge charge;
  };
  std::vector<Released> released_;
  void DestroyReleased();
  bool recording_ = false;
  bool fp16_ = false;
  bool coop_ = false;
  bool cm2_ = false;
  bool statistics_ = false;  // pipelines keep the driver's statistics
  uint32_t zero_copy_type_ = UINT32_MAX;
  ByteLedger allocated_;            // the bytes of the buffers made here
  std::unique_ptr<OpTimer> timer_;  // options.op_times
};

}  // namespace fsdpd::edge
