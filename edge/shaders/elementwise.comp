#version 450
// op 0: out = a + b (the residual add); op 1: out = silu(a) = a · σ(a). With -DOUT_F16 out is
// fp16 (a matmul's x, Backend::MatmulInput): the fp32 result rounded once.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) readonly buffer B { float b[]; };
layout(std430, binding = 2) writeonly buffer Out { OTYPE result[]; };
layout(push_constant) uniform Push { uint count; uint op; } p;
void main() {
  for (uint i = gl_GlobalInvocationID.x; i < p.count; i += gl_NumWorkGroups.x * 256) {
    const float x = a[i];
    const float value = p.op == 0 ? x + b[i] : x / (1.0 + exp(-x));
    result[i] = OTYPE(value);
  }
}
