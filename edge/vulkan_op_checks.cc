#include "edge/vulkan_op_checks.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "edge/vulkan_context.h"

namespace fsdpd::edge {

absl::Status RequireNotInt8(const char* op, const char* role, Buffer& buffer) {
  if (Vk(buffer).int8_cols == 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      op, ": ", role,
      " is int8 weights (Backend::Int8Weight), which only Linear reads, as its weight"));
}

absl::Status RequireFp32(const char* op, const char* role, Buffer& buffer) {
  FSDPD_RETURN_IF_ERROR(RequireNotInt8(op, role, buffer));
  if (!Vk(buffer).half) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      op, ": ", role,
      " is an fp16 matmul input (Backend::MatmulInput), which only Linear reads as x; ", op,
      " needs an fp32 buffer (Backend::Floats)"));
}

absl::Status CheckIndex(const char* what, int64_t elements) {
  if (elements >= (int64_t{1} << 32)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": ", elements, " elements exceed the shaders' 32-bit indices; use a smaller batch"));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> CheckAttention(const char* op, Buffer& qkv, Buffer& out, int64_t batch,
                                       int64_t rows, int64_t heads, int64_t dim,
                                       const VkPhysicalDeviceLimits& limits) {
  FSDPD_RETURN_IF_ERROR(RequireFp32(op, "qkv", qkv));
  FSDPD_RETURN_IF_ERROR(RequireFp32(op, "out", out));
  const int64_t head_dim = dim / heads;
  if (head_dim > kMaxAttentionHeadDim) {
    return absl::InvalidArgumentError(
        absl::StrCat("attention head_dim ", head_dim, " (dim ", dim, " / heads ", heads,
                     ") exceeds the shader's limit of ", kMaxAttentionHeadDim));
  }
  FSDPD_RETURN_IF_ERROR(CheckIndex("attention qkv", rows * 3 * dim));
  if (batch * heads > limits.maxComputeWorkGroupCount[1]) {
    return absl::InvalidArgumentError(absl::StrCat("attention: batch × heads = ", batch * heads,
                                                   " exceeds the device's workgroup limit"));
  }
  return head_dim;
}

uint32_t GridStride(const VkPhysicalDeviceLimits& limits, int64_t count) {
  const int64_t groups = std::max<int64_t>(1, (count + 255) / 256);
  return static_cast<uint32_t>(
      std::min<int64_t>(groups, std::min<uint32_t>(limits.maxComputeWorkGroupCount[0], 65535)));
}

absl::StatusOr<std::pair<uint32_t, uint32_t>> BlockGrid(const VkPhysicalDeviceLimits& limits,
                                                        const std::string& what, int64_t rows,
                                                        int64_t columns, OutputBlock block) {
  const int64_t x = (columns + block.cols - 1) / block.cols;
  const int64_t y = (rows + block.rows - 1) / block.rows;
  if (x > limits.maxComputeWorkGroupCount[0] || y > limits.maxComputeWorkGroupCount[1]) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " of ", rows, " rows × ", columns, " outputs in ", block.rows, "×", block.cols,
        " blocks needs ", x, " × ", y, " workgroups, more than the device allows (",
        limits.maxComputeWorkGroupCount[0], " × ", limits.maxComputeWorkGroupCount[1], ")"));
  }
  return std::pair<uint32_t, uint32_t>(static_cast<uint32_t>(x), static_cast<uint32_t>(y));
}

std::pair<uint32_t, uint32_t> RowGrid(int64_t rows) {
  const int64_t x = std::min<int64_t>(std::max<int64_t>(rows, 1), 65535);
  return {static_cast<uint32_t>(x), static_cast<uint32_t>((rows + x - 1) / x)};
}

}  // namespace fsdpd::edge
