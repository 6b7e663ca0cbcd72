#version 450
// The ceiling of the matrix units through workgroup-scope cooperative matrices: what any matmul
// shader built on GL_NV_cooperative_matrix2 can reach on the device. Each workgroup loads one
// BM×BK fp16 slice and one BK×BN fp16 slice once, then multiply-adds them p.steps times into a
// BM×BN fp32 accumulator, the block shape and types of matmul_cm2.comp's fastest blocks, with no
// memory traffic inside the loop (each product depends on the last only through the accumulator,
// as in the matmul). The accumulator is stored at the end so that nothing is optimised away.
// bench/edge_probes.cc (MatrixUnitPeakTflops) dispatches it; compiled like matmul_cm2.comp
// (bench/edge_shaders/variants.cmake).
#extension GL_KHR_cooperative_matrix : require
#extension GL_NV_cooperative_matrix2 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 256
#endif
#ifndef BK
#define BK 32
#endif
#ifndef THREADS
#define THREADS 256
#endif
layout(local_size_x = THREADS) in;
// BM·BK + BN·BK fp16 values: the two slices, both stored row by row with BK columns.
layout(std430, binding = 0) readonly buffer Operands { float16_t operands[]; };
layout(std430, binding = 1) writeonly buffer Out { float result[]; };
layout(push_constant) uniform Push { uint steps; } p;

void main() {
  tensorLayoutNV<2> a_layout = createTensorLayoutNV(2);
  a_layout = setTensorLayoutDimensionNV(a_layout, BM, BK);
  tensorLayoutNV<2> b_layout = createTensorLayoutNV(2);
  b_layout = setTensorLayoutDimensionNV(b_layout, BN, BK);
  const tensorViewNV<2, false, 1, 0> transposed = createTensorViewNV(2, false, 1, 0);
  coopmat<float16_t, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA> a;
  coopMatLoadTensorNV(a, operands, 0, sliceTensorLayoutNV(a_layout, 0, BM, 0, BK));
  coopmat<float16_t, gl_ScopeWorkgroup, BK, BN, gl_MatrixUseB> b;
  coopMatLoadTensorNV(b, operands, BM * BK, sliceTensorLayoutNV(b_layout, 0, BN, 0, BK),
                      transposed);
  coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator> acc =
      coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>(0.0);
  for (uint i = 0; i < p.steps; ++i) acc = coopMatMulAdd(a, b, acc);
  tensorLayoutNV<2> out_layout = createTensorLayoutNV(2);
  out_layout = setTensorLayoutDimensionNV(out_layout, gl_NumWorkGroups.x * BM, BN);
  coopMatStoreTensorNV(acc, result, 0, sliceTensorLayoutNV(out_layout, gl_WorkGroupID.x * BM, BM, 0, BN));
}
