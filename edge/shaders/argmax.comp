#version 450
// Greedy decoding's pick (edge/argmax.h's rule): the smallest v < vocab whose logits[v] is the
// largest, NaN never the largest, 0 for a row of NaN. It goes to next[0], the next step's
// Embedding input, and to history[index], which the host reads once for several steps. One
// workgroup: each invocation walks every THREADS-th value (in increasing order, so its first
// largest is its smallest), then a tree in shared memory keeps the larger value, or the smaller
// index of two equal ones.
#include "common.glsl"
#define THREADS 256
layout(local_size_x = THREADS) in;
layout(std430, binding = 0) readonly buffer Logits { float logits[]; };
layout(std430, binding = 1) writeonly buffer Next { int next_token[]; };
layout(std430, binding = 2) writeonly buffer History { int history[]; };
layout(push_constant) uniform Push { uint vocab; uint index; } p;
shared float best_value[THREADS];
shared uint best_index[THREADS];
const uint kNone = 0xffffffffu;

// Whether (value, index) goes before (other_value, other_index); kNone goes after everything.
bool Before(float value, uint index, float other_value, uint other_index) {
  if (index == kNone) return false;
  if (other_index == kNone) return true;
  return value > other_value || (value == other_value && index < other_index);
}

void main() {
  const uint lane = gl_LocalInvocationID.x;
  float value = 0.0;
  uint index = kNone;
  for (uint v = lane; v < p.vocab; v += THREADS) {
    const float x = logits[v];
    if (!isnan(x) && (index == kNone || x > value)) {
      value = x;
      index = v;
    }
  }
  best_value[lane] = value;
  best_index[lane] = index;
  barrier();
  for (uint width = THREADS / 2; width > 0; width /= 2) {
    if (lane < width &&
        Before(best_value[lane + width], best_index[lane + width], best_value[lane],
               best_index[lane])) {
      best_value[lane] = best_value[lane + width];
      best_index[lane] = best_index[lane + width];
    }
    barrier();
  }
  if (lane == 0) {
    const int pick = best_index[0] == kNone ? 0 : int(best_index[0]);
    next_token[0] = pick;
    history[p.index] = pick;
  }
}
