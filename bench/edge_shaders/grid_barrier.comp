#version 450
// Grid-wide barriers inside one dispatch (bench/edge_probes.h, GridBarrierMicroseconds): what a
// persistent decoding kernel, one dispatch for several ops, would pay between its ops instead
// of a dispatch and a pipeline barrier each. Every workgroup crosses p.barriers barriers. At
// barrier b, invocation 0 of each workgroup adds its arrival to a count at device scope
// (release: what the workgroup wrote before it is visible first), then spins until the count
// reaches b · p.groups, and acquires (it then sees what the others wrote before theirs).
//
// A grid-wide barrier needs every workgroup of the dispatch running at once, which Vulkan does
// not promise: a workgroup waiting for one that has not started would wait for ever. So a
// spin gives up after p.spin_limit reads of the count, sets `timed_out`, and every workgroup
// then stops crossing barriers: the host reports that the workgroups did not all run at once.
#extension GL_KHR_memory_scope_semantics : require
layout(local_size_x = 128) in;
layout(std430, binding = 0) coherent buffer Sync {
  uint arrived;    // arrivals so far, over every barrier
  uint timed_out;  // set by a spin that gave up
};
layout(push_constant) uniform Push {
  uint barriers;    // to cross
  uint groups;      // the arrivals each barrier waits for (the dispatch's workgroups)
  uint spin_limit;  // reads of the count before a spin gives up
} p;

shared bool give_up;

void main() {
  for (uint b = 1u; b <= p.barriers; ++b) {
    barrier();  // the workgroup's own work before the barrier is done
    if (gl_LocalInvocationIndex == 0u) {
      atomicAdd(arrived, 1u, gl_ScopeDevice, gl_StorageSemanticsBuffer, gl_SemanticsRelease);
      const uint target = b * p.groups;
      // The spin reads the count relaxed, and acquires once after it: on lavapipe a spin on
      // an acquiring read never came back once it had to wait (the workgroup's later writes
      // were lost, and the dispatch ended). Another workgroup's spin may have given up
      // already: looked at every 1024 reads.
      uint spins = 0u;
      bool others_gave_up = false;
      while (!others_gave_up && spins < p.spin_limit &&
             atomicLoad(arrived, gl_ScopeDevice, gl_StorageSemanticsBuffer,
                        gl_SemanticsRelaxed) < target) {
        ++spins;
        if ((spins & 1023u) == 0u) {
          others_gave_up = atomicLoad(timed_out, gl_ScopeDevice, gl_StorageSemanticsBuffer,
                                      gl_SemanticsRelaxed) != 0u;
        }
      }
      memoryBarrier(gl_ScopeDevice, gl_StorageSemanticsBuffer, gl_SemanticsAcquire);
      const bool stop = others_gave_up || spins >= p.spin_limit;
      if (stop) atomicOr(timed_out, 1u);
      give_up = stop;
    }
    barrier();
    if (give_up) break;  // uniform: every invocation read it after the same barrier
  }
}
