#version 450
// nn.Linear with workgroup-scope cooperative matrices (GL_NV_cooperative_matrix2):
// out[M, N] = x[M, K] · w[N, K]ᵀ (+ bias). The whole workgroup owns one BM×BN accumulator and
// multiplies BM×BK slices of x by BK×BN slices of wᵀ; how they are staged through shared memory
// and fed to the matrix units is the driver's, which is the point of this extension over
// matmul_coop.comp's subgroup fragments. Tensor layouts carry the matrix bounds: loads past an
// edge read zeros and stores past it are dropped, so any M, N, K runs. x (fp32) is rounded to
// fp16 after its load, w is fp16, products sum in fp32, the bias is added per element.
// Compiled by edge/tools/glsl_to_spirv.cc (Debian 12's glslc predates the extension); the host
// uses it only where the device offers VK_NV_cooperative_matrix2 and VK_KHR_cooperative_matrix.
#extension GL_KHR_cooperative_matrix : require
#extension GL_NV_cooperative_matrix2 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 128
#endif
#ifndef BK
#define BK 32
#endif
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer W { float16_t w[]; };
layout(std430, binding = 2) readonly buffer Bias { float16_t bias[]; };
layout(std430, binding = 3) writeonly buffer Out { float result[]; };
layout(push_constant) uniform Push { uint m; uint n; uint k; uint has_bias; } p;

float AddBias(const in uint row, const in uint col, const in float value, const in uint col0) {
  return col0 + col < p.n ? value + float(bias[col0 + col]) : value;
}

void main() {
  const uint row0 = gl_WorkGroupID.y * BM;
  const uint col0 = gl_WorkGroupID.x * BN;
  tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> x_layout =
      createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
  x_layout = setTensorLayoutDimensionNV(x_layout, p.m, p.k);
  tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> w_layout =
      createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
  w_layout = setTensorLayoutDimensionNV(w_layout, p.n, p.k);
  tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> out_layout =
      createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
  out_layout = setTensorLayoutDimensionNV(out_layout, p.m, p.n);
  tensorViewNV<2, false, 1, 0> transposed = createTensorViewNV(2, false, 1, 0);

  coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator> acc =
      coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>(0.0);
  for (uint k0 = 0; k0 < p.k; k0 += BK) {
    coopmat<float, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA> x_wide;
    coopMatLoadTensorNV(x_wide, x, 0, sliceTensorLayoutNV(x_layout, row0, BM, k0, BK));
    coopmat<float16_t, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA> x_slice =
        coopmat<float16_t, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA>(x_wide);
    coopmat<float16_t, gl_ScopeWorkgroup, BK, BN, gl_MatrixUseB> w_slice;
    coopMatLoadTensorNV(w_slice, w, 0, sliceTensorLayoutNV(w_layout, col0, BN, k0, BK), transposed);
    acc = coopMatMulAdd(x_slice, w_slice, acc);
  }
  if (p.has_bias != 0) coopMatPerElementNV(acc, acc, AddBias, col0);
  coopMatStoreTensorNV(acc, result, 0, sliceTensorLayoutNV(out_layout, row0, BM, col0, BN));
}
