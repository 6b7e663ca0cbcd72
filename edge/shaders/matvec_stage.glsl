// x staged in shared memory for the matvecs (matvec.comp, matvec_int8.comp) built with
// -DSTAGE_X (VulkanOptions::stage_matvec_x): for one row (decoding's) of at most STAGE_FLOATS
// inputs, the workgroup reads x once, folds the RMSNorm in (FLAG_NORM: its sum of squares over
// the workgroup, then x · rsqrt(mean(x²) + eps) · weight, rmsnorm.comp's order), rounds it as
// the shader's x is rounded, and keeps it in shared memory; its columns then read x from there.
// Without it every column's lanes read x from memory and each column folded the norm itself
// (the sum of squares beside its dot products, the scale at the end).
//
// The including shader defines THREADS, StageRead(index) (x's element, fp32), StageNorm(index)
// (the norm weight's) and StageRound(value) (the rounding its products apply to x).
#ifdef STAGE_X
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#define STAGE_FLOATS 6144  // 24 KiB: within the 32 KiB some devices give a workgroup (lavapipe)
shared vec4 staged_x[STAGE_FLOATS / 4];
shared float stage_sums[THREADS];  // a sum per subgroup

// The workgroup's sum of one value an invocation (every invocation calls it).
float StageSum(float value) {
  for (uint width = gl_SubgroupSize / 2; width > 0; width /= 2) {
    value += subgroupShuffleXor(value, width);
  }
  if (gl_SubgroupInvocationID == 0) stage_sums[gl_SubgroupID] = value;
  barrier();
  float total = 0.0;
  for (uint s = 0; s < gl_NumSubgroups; ++s) total += stage_sums[s];
  return total;
}

// x's k elements into staged_x, normalized where `norm`, then rounded. Every invocation calls it
// (uniform control flow); staged_x is readable by all once it returns.
void StageX(uint k, bool norm, float eps) {
  const uint t = gl_LocalInvocationID.x;
  float square = 0.0;
  for (uint i = t; i < k; i += THREADS) {
    const float value = StageRead(i);
    staged_x[i / 4][i % 4] = value;
    square += value * value;
  }
  float scale = 1.0;
  if (norm) scale = inversesqrt(StageSum(square) / float(k) + eps);
  // Each invocation rewrites the elements it wrote.
  for (uint i = t; i < k; i += THREADS) {
    float value = staged_x[i / 4][i % 4];
    if (norm) value = value * scale * StageNorm(i);
    staged_x[i / 4][i % 4] = StageRound(value);
  }
  barrier();
}
#endif
