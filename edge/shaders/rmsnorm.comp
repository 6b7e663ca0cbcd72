#version 450
// nn.RMSNorm: out[r] = x[r] · rsqrt(mean(x[r]²) + eps) · weight. One workgroup per row. With
// -DOUT_F16 out is fp16 (a matmul's x, Backend::MatmulInput): the fp32 result rounded once.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer Weight { WTYPE weight[]; };
layout(std430, binding = 2) writeonly buffer Out { OTYPE result[]; };
layout(push_constant) uniform Push { uint rows; uint dim; float eps; } p;
shared float partial[256];
void main() {
  const uint row = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
  if (row >= p.rows) return;  // uniform per workgroup
  const uint base = row * p.dim;
  const uint lane = gl_LocalInvocationID.x;
  float sum = 0.0;
  for (uint d = lane; d < p.dim; d += 256) sum += x[base + d] * x[base + d];
  partial[lane] = sum;
  barrier();
  for (uint stride = 128; stride > 0; stride >>= 1) {
    if (lane < stride) partial[lane] += partial[lane + stride];
    barrier();
  }
  const float scale = inversesqrt(partial[0] / float(p.dim) + p.eps);
  for (uint d = lane; d < p.dim; d += 256) {
    const float value = x[base + d] * scale * float(weight[d]);
    result[base + d] = OTYPE(value);
  }
}
