#version 450
// Causal attention of a few new positions against a cache of qkv rows (decoding), second pass:
// a workgroup a (query row, head) adds attention_decode.comp's slices. With m the largest slice
// max, out[d] = Σ_s exp(m_s − m) · acc_s[d] / Σ_s exp(m_s − m) · sum_s: the online softmax's
// rescaling, done once over the slices. A slice that held no key has sum 0 and weighs nothing.
// The push constants are attention.comp's; the grid {rows · heads}.
#include "common.glsl"
#include "attention_decode.glsl"
#define THREADS 128
layout(local_size_x = THREADS) in;
layout(std430, binding = 0) readonly buffer Partials { float partials[]; };
layout(std430, binding = 1) writeonly buffer Out { float result[]; };
layout(push_constant) uniform Push { uint batch; uint seq; uint heads; uint head_dim; uint causal; float scale; uint first; } p;

void main() {
  const uint row = gl_WorkGroupID.x / p.heads;
  const uint h = gl_WorkGroupID.x % p.heads;
  const uint hd = p.head_dim;
  const uint tid = gl_LocalInvocationID.x;
  // The slices of the last row, which has the most keys: the first pass's grid.
  const uint slices = (p.first + p.seq + SPLIT - 1) / SPLIT;
  const uint base = (row * p.heads + h) * slices * (hd + 2);
  float largest = -FLT_MAX;
  for (uint s = 0; s < slices; ++s) largest = max(largest, partials[base + s * (hd + 2) + hd]);
  if (tid >= hd) return;
  float total = 0.0, acc = 0.0;
  for (uint s = 0; s < slices; ++s) {
    const uint slice_base = base + s * (hd + 2);
    const float weight = exp(partials[slice_base + hd] - largest);
    total += weight * partials[slice_base + hd + 1];
    acc += weight * partials[slice_base + tid];
  }
  result[row * p.heads * hd + h * hd + tid] = acc / total;
}
