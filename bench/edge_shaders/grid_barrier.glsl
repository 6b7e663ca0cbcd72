// A grid-wide barrier inside one dispatch (grid_barrier.comp times it, matvec_chain.comp orders
// its stages with it). Its count is the buffer at binding GRID_BARRIER_BINDING, which the
// includer defines, as it declares a push constant `p.spin_limit` (reads of the count before
// giving up), before including this file.
// Every invocation of the workgroup calls GridBarrier with the same target: invocation 0 adds its
// workgroup's arrival to the count at device scope (release: the workgroup's writes before the
// barrier are visible first), spins until the count reaches `target`, and acquires (it then sees
// what the others wrote before theirs).
//
// A grid-wide barrier needs every workgroup of the dispatch running at once, which Vulkan does
// not promise: a workgroup waiting for one that has not started would wait for ever. So a spin
// gives up after p.spin_limit reads of the count, sets `timed_out`, and GridBarrier returns
// false in every workgroup that sees it, which then stops: the host reports that the workgroups
// did not all run at once.
#extension GL_KHR_memory_scope_semantics : require
layout(std430, binding = GRID_BARRIER_BINDING) coherent buffer GridBarrierCount {
  uint arrived;    // arrivals so far, over every barrier since the host zeroed it
  uint timed_out;  // set by a spin that gave up
};

shared bool grid_give_up;

bool GridBarrier(uint target) {
  memoryBarrierBuffer();
  barrier();  // the workgroup's own writes before the barrier are done
  if (gl_LocalInvocationIndex == 0u) {
    atomicAdd(arrived, 1u, gl_ScopeDevice, gl_StorageSemanticsBuffer, gl_SemanticsRelease);
    // The spin reads the count relaxed, and acquires once after it: on lavapipe a spin on an
    // acquiring read never came back once it had to wait (the workgroup's later writes were
    // lost, and the dispatch ended). Another workgroup's spin may have given up already: looked
    // at every 1024 reads.
    uint spins = 0u;
    bool others_gave_up = false;
    while (!others_gave_up && spins < p.spin_limit &&
           atomicLoad(arrived, gl_ScopeDevice, gl_StorageSemanticsBuffer, gl_SemanticsRelaxed) <
               target) {
      ++spins;
      if ((spins & 1023u) == 0u) {
        others_gave_up = atomicLoad(timed_out, gl_ScopeDevice, gl_StorageSemanticsBuffer,
                                    gl_SemanticsRelaxed) != 0u;
      }
    }
    memoryBarrier(gl_ScopeDevice, gl_StorageSemanticsBuffer, gl_SemanticsAcquire);
    const bool stop = others_gave_up || spins >= p.spin_limit;
    if (stop) atomicOr(timed_out, 1u);
    grid_give_up = stop;
  }
  barrier();
  memoryBarrierBuffer();
  return !grid_give_up;  // uniform: every invocation read it after the same barrier
}
