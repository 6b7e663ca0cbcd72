#version 450
// out[t, d] = table[tokens[t], d] (nn.Embedding). Token ids were checked on the host.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer Table { WTYPE table[]; };
layout(std430, binding = 1) readonly buffer Tokens { int tokens[]; };
layout(std430, binding = 2) writeonly buffer Out { float result[]; };
layout(push_constant) uniform Push { uint count; uint dim; } p;
void main() {
  const uint total = p.count * p.dim;
  for (uint i = gl_GlobalInvocationID.x; i < total; i += gl_NumWorkGroups.x * 256) {
    const uint t = i / p.dim;
    const uint d = i - t * p.dim;
    result[i] = float(table[uint(tokens[t]) * p.dim + d]);
  }
}
