#version 450
// Grid-wide barriers inside one dispatch (bench/edge_probes.h, GridBarrierMicroseconds): what a
// persistent decoding kernel, one dispatch for several ops, would pay between its ops instead
// of a dispatch and a pipeline barrier each. Every workgroup crosses p.barriers barriers of
// p.groups arrivals each (grid_barrier.glsl), and stops at the first that gives up.
layout(local_size_x = 128) in;
layout(push_constant) uniform Push {
  uint barriers;    // to cross
  uint groups;      // the arrivals each barrier waits for (the dispatch's workgroups)
  uint spin_limit;  // reads of the count before a spin gives up
} p;
#define GRID_BARRIER_BINDING 0
#include "grid_barrier.glsl"

void main() {
  for (uint b = 1u; b <= p.barriers; ++b) {
    if (!GridBarrier(b * p.groups)) break;
  }
}
