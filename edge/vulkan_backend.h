// The Vulkan compute backend: SPIR-V shaders embedded at build time (edge/shaders), one
// command buffer per Finish, weights in fp16 where the device can read and compute on fp16
// (shaderFloat16 and storageBuffer16BitAccess) and fp32 otherwise, the matmul on
// cooperative matrices (VK_NV_cooperative_matrix) where the device reports the shape.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "edge/backend.h"

namespace fsdpd::edge {

struct VulkanHeap {
  uint64_t size = 0;
  bool device_local = false;
  bool host_visible = false;               // some memory type of this heap is host-visible
  bool device_local_host_visible = false;  // ... and one is both (zero-copy weights)
};

struct VulkanDeviceInfo {
  int index = 0;
  std::string name;
  std::string type;  // discrete, integrated, virtual, cpu, other
  std::string api_version;
  std::vector<VulkanHeap> heaps;
  bool shader_float16 = false;
  bool storage_buffer_16bit = false;
  uint32_t subgroup_size = 0;
  bool subgroup_shuffle = false;  // in compute shaders (attention.comp sums scores with it)
  bool subgroup_vote = false;     // in compute shaders (attention_coop.comp's rescaling test)
  bool nv_cooperative_matrix = false;
  std::vector<std::string> cooperative_matrix_shapes;  // "16x16x16 fp16·fp16+fp32" etc.
};

// Every Vulkan device the loader reports. No loader or no device is an error saying how to
// get one.
absl::StatusOr<std::vector<VulkanDeviceInfo>> ListVulkanDevices();

struct VulkanOptions {
  int device = 0;
  enum class Precision { kAuto, kFp32, kFp16 } precision = Precision::kAuto;
  bool cooperative_matrix = true;  // used only where the device reports the shape
  // Upload weights through a staging buffer, and read and write activations through one, even
  // where a heap is device-local and host-visible: a discrete GPU's path on any device.
  bool force_staging = false;
  bool validation = false;  // VK_LAYER_KHRONOS_validation, errors counted
  // The cooperative-matrix matmul's block by name (CoopMatmulVariants() in edge/shaders.h);
  // empty: every block, the fastest chosen per matmul shape when it first runs. An unknown
  // name is refused.
  std::string coop_block;
  // int8 weights' matmul by the name Describe() gives it ("int8 128x256k32cm2h-s", "int8
  // tiled"); empty: every candidate, the fastest chosen per shape. A name not built here is
  // refused when the first int8 weight is placed. An x the named block cannot read (fp16 x for
  // a block of fp32 x) runs the tiled int8 shader; on the matrix units an fp32 x may also reach
  // a named fp16-x block through the cast (the faster of the two per shape).
  std::string int8_block;
  // Where attention runs on cooperative matrices, its shader by name: "subgroup"
  // (attention_coop.comp) or a workgroup-scope one of AttentionCm2Shaders() in edge/shaders.h;
  // empty: each, the fastest chosen per shape. A name not built, or not usable on the device,
  // is refused when the backend is created.
  std::string attention;
  // Whether the activations only a matmul reads (Backend::MatmulInput) are stored in fp16.
  // kAuto: where a workgroup-scope block reads fp16 x (no cast pass in front of it: the H200's
  // forward gained, bench/RESULTS.md), not on the tiled path (its fp16-x build ran 7% slower
  // there than casting inside the shader); kFp16: wherever fp16 is on and some matmul reads fp16
  // x (the tests run the tiled fp16-x path on lavapipe so); kFp32: never.
  enum class MatmulInputs { kAuto, kFp16, kFp32 } matmul_inputs = MatmulInputs::kAuto;
  // The layout of matvec.comp, which runs Linear for decoding's few rows: kNarrow, 8 columns of
  // 8 lanes a workgroup, an element a lane a step; kWide, 4 columns of 32 lanes reading 16-byte
  // vectors (far more loads in flight); kWideWords, the wide layout whose int8 matvec reads a
  // 4-byte word a lane instead, so that the lanes' x reads are contiguous (fp16 weights read
  // as in kWide; edge/shaders/matvec_int8.comp); kWide2 and kWide4, the wide layout computing 2
  // or 4 output columns a subgroup, each read of x serving all of them. kAuto: narrow on a CPU
  // device (lavapipe ran it fastest), kWide2 on every other.
  enum class MatvecLayout {
    kAuto,
    kNarrow,
    kWide,
    kWideWords,
    kWide2,
    kWide4
  } matvec_layout = MatvecLayout::kAuto;
  // Decoding's ops folded into its projections (Backend::FusedLinear, matvec.comp): the RMSNorm
  // before a projection, the SiLU after ffn.0, the residual add after out_proj and ffn.2, and the
  // qkv written straight into the cache: 60 fewer dispatches a token for 12 layers. Off: each op
  // on its own, as the forward runs them.
  bool fuse_into_linear = true;
  // Decoding's attention adds its slices of keys in the dispatch that computes them (the last
  // workgroup of a head to finish adds them all): 12 fewer dispatches a token for 12 layers.
  // Off: attention_decode_combine.comp adds them in a dispatch of its own. The same bits.
  bool combine_in_attention = true;
  // Threads that build the cooperative-matrix pipelines when the backend is created (the
  // driver compiles their shaders then); 0: one per core.
  int pipeline_threads = 0;
  // Descriptor sets kept per (pipeline, buffers) pair and reused (VulkanContext::Dispatch);
  // off: one written for every dispatch, as before (edge_bench --no-set-cache compares).
  bool cache_descriptor_sets = true;
  // Commands recorded before the batch is submitted without waiting, so that the device runs it
  // while the host records the next (VulkanContext::MakeRoom); Finish waits for them all. 0: one
  // submit, at Finish. Off while op_times runs.
  int submit_every = 16;
  // Pipelines built with the driver's statistics kept (registers per invocation, shared memory
  // and the like: VulkanBackend::pipeline_statistics), where the device offers
  // VK_KHR_pipeline_executable_properties.
  bool pipeline_statistics = false;
  // A GPU timestamp after every command, summed per shader (VulkanBackend::op_times()); a
  // device whose compute queue has no timestamps is refused.
  bool op_times = false;
};

// GPU time of one kind of operation (a shader, or "copy") over a run: from the end of the
// command before each one to its own end (edge/op_timer.h).
struct OpTime {
  std::string op;
  int64_t count = 0;
  double seconds = 0.0;
};

// A table of `times` per `units` (tokens, batches; at least 1) of `unit`, headed by the GPU's
// busy time against `wall_seconds`, the wall time of the same run: what is not GPU time is the
// host's (recording, descriptor updates, waits) or idle. `host`, where given, is a second table
// of the host's time by what it did (VulkanBackend::host_times), as a share of the wall time.
std::string FormatOpTimes(const std::vector<OpTime>& times, double wall_seconds, int64_t units,
                          const std::string& unit, const std::vector<OpTime>& host = {});

class VulkanBackend : public Backend {
 public:
  // Validation messages of severity error reported so far (0 unless options.validation).
  virtual int validation_errors() const = 0;
  virtual std::string last_validation_error() const = 0;
  virtual bool uses_fp16() const = 0;
  virtual bool uses_cooperative_matrix() const = 0;
  virtual bool zero_copy_weights() const = 0;
  // The matmul's choice for each shape run so far ("ROWSxOUTxIN: block"), where several
  // cooperative-matrix blocks were tuned, then attention's where several shaders were
  // ("attention, batch·heads B, seq S, head_dim D[, causal]: shader"); empty otherwise.
  virtual std::vector<std::string> matmul_choices() const = 0;
  // With options.pipeline_statistics, where the device offers them
  // (VK_KHR_pipeline_executable_properties): each matmul pipeline's statistics from the driver
  // ("128x256k32cm2h-s: Register Count 168, …"); else one line saying why there are none.
  virtual std::vector<std::string> pipeline_statistics() const = 0;
  // With options.op_times: the GPU time of each operation run since the backend was made or
  // ResetOpTimes, the longest first, counted once Finish returns; empty otherwise.
  virtual std::vector<OpTime> op_times() const = 0;
  // With options.op_times: the host's time recording commands ("recording commands", every
  // dispatch and copy) and, part of it, writing descriptor sets, over the same span; empty
  // otherwise.
  virtual std::vector<OpTime> host_times() const = 0;
  virtual void ResetOpTimes() = 0;
  // Descriptor sets written so far: one per (pipeline, buffers) pair that ran, while they are
  // kept (VulkanOptions::cache_descriptor_sets); one per dispatch otherwise.
  virtual int64_t descriptor_sets_written() const = 0;
};

absl::StatusOr<std::unique_ptr<VulkanBackend>> CreateVulkanBackend(const VulkanOptions& options);

// A matvec layout as the backend line names it once int8 weights are placed ("int8 weights:
// matvec wide words, …"): "narrow", "wide", "wide words", "wide, 2 columns a subgroup", "wide, 4
// columns a subgroup"; "auto" for kAuto.
const char* MatvecLayoutName(VulkanOptions::MatvecLayout layout);

}  // namespace fsdpd::edge
