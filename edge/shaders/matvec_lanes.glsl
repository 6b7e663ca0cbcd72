// The lanes of a matvec column (matvec.comp, matvec_int8.comp): LANES invocations share a
// column, each summing a part of its K products for ROWS rows; their sums are then added.
//
// Where a subgroup holds a column's LANES lanes (gl_SubgroupSize ≥ LANES: NVIDIA's 32 for the
// wide layout, lavapipe's 8 for the narrow), the lanes are numbered within the subgroup and
// added by log2(LANES) shuffles: no shared memory and no barrier. Decoding's matvecs are short
// (a workgroup reads 8 to 16 KiB), and the shared-memory tree's log2(LANES) barriers held each
// workgroup, and its slot on the SM, after its reads had landed (bench/RESULTS.md). Elsewhere the
// lanes are numbered within the workgroup and added through shared memory, as before.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require

// Whether a column's lanes are added by shuffles (uniform: the subgroup size is the device's).
bool LanesInSubgroup() { return gl_SubgroupSize >= LANES; }

// The workgroup's column slot (0 … THREADS / LANES − 1) and lane of this invocation.
uint MatvecSlot() {
  return LanesInSubgroup()
             ? gl_SubgroupID * (gl_SubgroupSize / LANES) + gl_SubgroupInvocationID / LANES
             : gl_LocalInvocationID.x / LANES;
}
uint MatvecLane() {
  return LanesInSubgroup() ? gl_SubgroupInvocationID % LANES : gl_LocalInvocationID.x % LANES;
}

shared float partial[ROWS][THREADS];  // [row][slot · LANES + lane], the shared-memory path

// Every lane's sums, added over the column's lanes; lane `row` then returns row `row`'s total
// (rows ≥ ROWS return 0). Every invocation of the workgroup must call it.
float SumOverLanes(float sums[ROWS], uint m, uint slot, uint lane) {
  if (LanesInSubgroup()) {
    [[unroll]] for (uint width = LANES / 2; width > 0; width /= 2) {
      [[unroll]] for (uint r = 0; r < ROWS; ++r) {
        if (r < m) sums[r] += subgroupShuffleXor(sums[r], width);
      }
    }
    return lane == 0u ? sums[0] : lane == 1u ? sums[1] : lane == 2u ? sums[2]
         : lane == 3u ? sums[3] : 0.0;
  }
  const uint at = slot * LANES + lane;
  [[unroll]] for (uint r = 0; r < ROWS; ++r) partial[r][at] = sums[r];
  barrier();
  [[unroll]] for (uint width = LANES / 2; width > 0; width /= 2) {
    if (lane < width) {
      [[unroll]] for (uint r = 0; r < ROWS; ++r) partial[r][at] += partial[r][at + width];
    }
    barrier();
  }
  return lane < ROWS ? partial[lane][slot * LANES] : 0.0;
}
