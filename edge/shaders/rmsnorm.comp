#version 450
// nn.RMSNorm: out[r] = x[r] · rsqrt(mean(x[r]²) + eps) · weight. One workgroup per row. With
// -DOUT_F16 out is fp16 (a matmul's x, Backend::MatmulInput): the fp32 result rounded once.
#include "common.glsl"
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer Weight { WTYPE weight[]; };
layout(std430, binding = 2) writeonly buffer Out { OTYPE result[]; };
layout(push_constant) uniform Push { uint rows; uint dim; float eps; } p;
shared float partial[256];  // a sum per subgroup
void main() {
  const uint row = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
  if (row >= p.rows) return;  // uniform per workgroup
  const uint base = row * p.dim;
  const uint lane = gl_LocalInvocationID.x;
  float sum = 0.0;
  for (uint d = lane; d < p.dim; d += 256) sum += x[base + d] * x[base + d];
  // Each subgroup's sum by shuffles, then the subgroups' sums through shared memory: one barrier
  // where a tree over the 256 lanes took nine. Decoding runs this on one row twice a layer, and
  // the barriers were most of its time (bench/RESULTS.md).
  for (uint width = gl_SubgroupSize / 2; width > 0; width /= 2) {
    sum += subgroupShuffleXor(sum, width);
  }
  if (gl_SubgroupInvocationID == 0) partial[gl_SubgroupID] = sum;
  barrier();
  float total = 0.0;
  for (uint s = 0; s < gl_NumSubgroups; ++s) total += partial[s];
  const float scale = inversesqrt(total / float(p.dim) + p.eps);
  for (uint d = lane; d < p.dim; d += 256) {
    const float value = x[base + d] * scale * float(weight[d]);
    result[base + d] = OTYPE(value);
  }
}
