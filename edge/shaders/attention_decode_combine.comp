#version 450
// Causal attention of a few new positions against a cache of qkv rows (decoding), second pass:
// a workgroup a (query row, head) adds attention_decode.comp's slices (AddSlices).
// The push constants are attention.comp's; the grid {rows · heads}.
#include "common.glsl"
#include "attention_decode.glsl"
#define THREADS 128
layout(local_size_x = THREADS) in;
layout(std430, binding = 0) readonly buffer Partials { float partials[]; };
layout(std430, binding = 1) writeonly buffer Out { float result[]; };
layout(push_constant) uniform Push { uint batch; uint seq; uint heads; uint head_dim; uint causal; float scale; uint first; } p;
#include "attention_decode_add.glsl"

void main() {
  const uint row = gl_WorkGroupID.x / p.heads;
  const uint h = gl_WorkGroupID.x % p.heads;
  const uint hd = p.head_dim;
  // The slices of the last row, which has the most keys: the first pass's grid.
  const uint slices = (p.first + p.seq + SPLIT - 1) / SPLIT;
  AddSlices((row * p.heads + h) * slices * (hd + 2), slices, hd, gl_LocalInvocationID.x,
            row * p.heads * hd + h * hd);
}
