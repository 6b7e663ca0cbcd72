#version 450
// Log-softmax and cross-entropy per row: nll[r] = logsumexp(logits[r]) − logits[r][target[r]].
// One workgroup per row: a max pass, then a sum of exp(x − max), both reduced in shared memory.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer Logits { float logits[]; };
layout(std430, binding = 1) readonly buffer Targets { int targets[]; };
layout(std430, binding = 2) writeonly buffer Nll { float nll[]; };
layout(push_constant) uniform Push { uint rows; uint vocab; } p;
shared float partial[256];
void main() {
  const uint row = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
  if (row >= p.rows) return;
  const uint base = row * p.vocab;
  const uint lane = gl_LocalInvocationID.x;
  float best = -3.402823466e38;
  for (uint v = lane; v < p.vocab; v += 256) best = max(best, logits[base + v]);
  partial[lane] = best;
  barrier();
  for (uint stride = 128; stride > 0; stride >>= 1) {
    if (lane < stride) partial[lane] = max(partial[lane], partial[lane + stride]);
    barrier();
  }
  const float row_max = partial[0];
  barrier();
  float sum = 0.0;
  for (uint v = lane; v < p.vocab; v += 256) sum += exp(logits[base + v] - row_max);
  partial[lane] = sum;
  barrier();
  for (uint stride = 128; stride > 0; stride >>= 1) {
    if (lane < stride) partial[lane] += partial[lane + stride];
    barrier();
  }
  if (lane == 0) nll[row] = log(partial[0]) + row_max - logits[base + uint(targets[row])];
}
