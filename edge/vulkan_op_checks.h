// The checks the Vulkan backend's ops make before they record a dispatch (edge/vulkan_backend.cc),
// each an InvalidArgument naming the op and what is wrong, and the dispatch grids that stay within
// the device's limits. Internal to edge/ and its probes (bench/edge_probes.cc).
#pragma once

#include <vulkan/vulkan.h>

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "edge/backend.h"
#include "edge/shader_variant.h"

namespace fsdpd::edge {

// attention.comp's MAX_HEAD_DIM, and attention_coop.comp's.
constexpr int64_t kMaxAttentionHeadDim = 128;

// An fp16 buffer (MatmulInput's) is written only by RmsNorm, Silu and Add and read only as
// Linear's x; every other use of one reads or writes fp32 and would misread it: refused, naming
// the op and the buffer's role in it.
// Int8 weights (Backend::Int8Weight) are only Linear's weight: refused as well, by both.
absl::Status RequireFp32(const char* op, const char* role, Buffer& buffer);
absl::Status RequireNotInt8(const char* op, const char* role, Buffer& buffer);

// `elements` within the shaders' 32-bit indices.
absl::Status CheckIndex(const char* what, int64_t elements);

// The checks both attention ops make (fp32 buffers, head_dim within the shaders' limit, qkv's
// `rows` rows within 32-bit indices, a workgroup row per (batch, head)); head_dim.
absl::StatusOr<int64_t> CheckAttention(const char* op, Buffer& qkv, Buffer& out, int64_t batch,
                                       int64_t rows, int64_t heads, int64_t dim,
                                       const VkPhysicalDeviceLimits& limits);

// Workgroups of 256 for `count` elements, at most as many as the device (and 65535) allows: the
// shaders stride over what is left.
uint32_t GridStride(const VkPhysicalDeviceLimits& limits, int64_t count);

// A workgroup per output block of a rows × columns matmul, as {x, y} = {column blocks, row
// blocks} (ragged edges count as blocks); an InvalidArgument naming `what` where either exceeds
// the device's maxComputeWorkGroupCount.
absl::StatusOr<std::pair<uint32_t, uint32_t>> BlockGrid(const VkPhysicalDeviceLimits& limits,
                                                        const std::string& what, int64_t rows,
                                                        int64_t columns, OutputBlock block);

// A workgroup per row, as {x, y} workgroups with x ≤ 65535.
std::pair<uint32_t, uint32_t> RowGrid(int64_t rows);

}  // namespace fsdpd::edge
