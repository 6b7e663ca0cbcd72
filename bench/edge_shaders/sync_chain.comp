#version 450
// One link of a chain of dependent dispatches (bench/edge_probes.h, DependentDispatchMicroseconds):
// each invocation adds one to its element of a count, and nothing else. VulkanContext::Dispatch
// records a barrier after it, as after every op of decoding, so the next link starts only once
// this one's writes are visible: the chain's time a link is what one dispatch an op costs
// before any op does work. After D links every element has grown by D, which the host checks.
layout(local_size_x = 128) in;
layout(std430, binding = 0) buffer Counts { uint counts[]; };
layout(push_constant) uniform Push { uint n; } p;

void main() {
  const uint at = gl_GlobalInvocationID.x;
  if (at < p.n) counts[at] += 1u;
}
