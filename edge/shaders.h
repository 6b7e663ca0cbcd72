// The edge runtime's compute shaders. Every variant is one edge_shader() entry of
// edge/shaders/variants.cmake; the build compiles each to SPIR-V and generates from that list the
// Shader enum (one enumerator per variant, in list order) and VariantOf(Shader), its row
// (edge/shader_variant.h): code, name, layout, output block, and whether it is a matmul block or
// attention shader the backend tunes among. This header adds the views the backend and the bench
// choose from.
#pragma once

#include <vector>

#include "edge/shader_variant.h"
#include "edge/shaders/variants.h"  // generated: enum class Shader, kShaderCount, VariantOf(Shader)

namespace fsdpd::edge {

// The cooperative-matrix matmul's block shapes, in list order (the default first), each with
// the name VulkanOptions::coop_block takes ("128x128k32": rows × columns per workgroup, K
// slice). The workgroup-scope ones (VK_NV_cooperative_matrix2) are listed only where they were
// built. A half_input block reads x as fp16: the host casts x with Shader::kToHalf first.
struct CoopMatmulVariant {
  Shader shader;
  const char* block;
  bool workgroup_scope = false;
  bool half_input = false;
};
const std::vector<CoopMatmulVariant>& CoopMatmulVariants();

// The workgroup-scope attention shaders this build has (none without slang's glslang), each
// with the name VulkanOptions::attention takes.
struct AttentionVariant {
  Shader shader;
  const char* name;
};
std::vector<AttentionVariant> AttentionCm2Shaders();

}  // namespace fsdpd::edge
