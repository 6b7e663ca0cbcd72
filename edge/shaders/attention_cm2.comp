#version 450
// attention.comp on workgroup-scope cooperative matrices (GL_NV_cooperative_matrix2), for
// head_dim ≤ HD: out[b, i, h] = Σ_j softmax_j(q_i·k_j/√head_dim) v_j, over j ≤ i when causal,
// with an online softmax (no [seq, seq] matrix). A workgroup owns BR queries of one
// (batch, head) and walks the keys BC at a time:
//   S = Q·Kᵀ (fp16 products, fp32 sums), scaled by 1/√head_dim in fp32, masked;
//   m' = max(m, rowmax S); P = exp(S − m') rounded to fp16; l = e^(m − m')·l + rowsum P;
//   O = e^(m − m')·O + P·V (fp32).
// and finally out = O / l. The row sums are P times a matrix of ones on the matrix units, so l
// sums the same fp16 weights that P·V does. Row-wise quantities (m, l, the rescale factor)
// live as matrices whose every column holds the row's value, which is how the extension's row
// reductions hand them back. Masked scores are −FLT_MAX/2, not −inf: e^(m − m') of two masked
// rows stays finite.
//
// The input is qkv rounded once to fp16 by to_half.comp (the host casts it first: every query
// block reads all of K and V again); tensor layouts address one head's q, k or v as a
// [seq, head_dim] matrix with row stride 3·dim, clamped: rows past seq and columns past
// head_dim read zeros, and stores past seq are dropped. So the error bound is attention.comp's.
//
// Compiled by edge/tools/glsl_to_spirv.cc, like matmul_cm2.comp.
#extension GL_KHR_cooperative_matrix : require
#extension GL_NV_cooperative_matrix2 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
#ifndef BR
#define BR 64
#endif
#ifndef BC
#define BC 64
#endif
#ifndef HD
#define HD 128
#endif
#ifndef THREADS
#define THREADS 128
#endif
layout(local_size_x = THREADS) in;
layout(std430, binding = 0) readonly buffer Qkv { float16_t qkv[]; };
layout(std430, binding = 1) writeonly buffer Out { float result[]; };
layout(push_constant) uniform Push { uint batch; uint seq; uint heads; uint head_dim; uint causal; float scale; } p;

#define NEG_HALF_MAX -1.70141173e38  // −FLT_MAX/2
#define SCORES coopmat<float, gl_ScopeWorkgroup, BR, BC, gl_MatrixUseAccumulator>
#define OUTPUT coopmat<float, gl_ScopeWorkgroup, BR, HD, gl_MatrixUseAccumulator>

float Mask(const in uint row, const in uint col, const in float s, const in uint q0,
           const in uint k0) {
  const uint j = k0 + col;
  return j >= p.seq || (p.causal != 0 && j > q0 + row) ? NEG_HALF_MAX : s;
}
float Exp(const in uint row, const in uint col, const in float s) { return exp(s); }
float Larger(const in uint row, const in uint col, const in float a, const in float b) {
  return max(a, b);
}
float Maximum(const in float a, const in float b) { return max(a, b); }
float Smear(const in float a, const in float b) { return a; }
float Reciprocal(const in uint row, const in uint col, const in float l) {
  return l == 0.0 ? 0.0 : 1.0 / l;
}

void main() {
  const uint bh = gl_WorkGroupID.y;
  const uint b = bh / p.heads;
  const uint h = bh - b * p.heads;
  const uint q0 = gl_WorkGroupID.x * BR;
  const uint dim = p.heads * p.head_dim;
  // Element offsets of this head's q, k and v at sequence position 0.
  const uint base = b * p.seq * 3 * dim + h * p.head_dim;
  tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> head =
      createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
  head = setTensorLayoutDimensionNV(head, p.seq, p.head_dim);
  head = setTensorLayoutStrideNV(head, 3 * dim, 1);
  const tensorViewNV<2, false, 1, 0> transposed = createTensorViewNV(2, false, 1, 0);

  coopmat<float16_t, gl_ScopeWorkgroup, BR, HD, gl_MatrixUseA> q;
  coopMatLoadTensorNV(q, qkv, base, sliceTensorLayoutNV(head, q0, BR, 0, HD));
  const coopmat<float16_t, gl_ScopeWorkgroup, BC, BC, gl_MatrixUseB> ones =
      coopmat<float16_t, gl_ScopeWorkgroup, BC, BC, gl_MatrixUseB>(1.0);
  OUTPUT o = OUTPUT(0.0);
  SCORES m = SCORES(NEG_HALF_MAX);
  SCORES l = SCORES(0.0);

  const uint key_end = p.causal != 0 ? min(q0 + BR, p.seq) : p.seq;
  for (uint k0 = 0; k0 < key_end; k0 += BC) {
    coopmat<float16_t, gl_ScopeWorkgroup, HD, BC, gl_MatrixUseB> k_t;
    coopMatLoadTensorNV(k_t, qkv, base + dim, sliceTensorLayoutNV(head, k0, BC, 0, HD),
                        transposed);
    SCORES s = coopMatMulAdd(q, k_t, SCORES(0.0));
    s *= float(p.scale);
    if (k0 + BC > p.seq || (p.causal != 0 && k0 + BC > q0 + 1)) {
      coopMatPerElementNV(s, s, Mask, q0, k0);
    }
    SCORES row_max;
    coopMatReduceNV(row_max, s, gl_CooperativeMatrixReduceRowNV, Maximum);
    const SCORES previous = m;
    coopMatPerElementNV(m, previous, Larger, row_max);
    SCORES weights, factor;
    coopMatPerElementNV(weights, s - m, Exp);
    coopMatPerElementNV(factor, previous - m, Exp);
    const coopmat<float16_t, gl_ScopeWorkgroup, BR, BC, gl_MatrixUseA> p16 =
        coopmat<float16_t, gl_ScopeWorkgroup, BR, BC, gl_MatrixUseA>(weights);
    l = factor * l + coopMatMulAdd(p16, ones, SCORES(0.0));
    OUTPUT factor_wide;
    coopMatReduceNV(factor_wide, factor, gl_CooperativeMatrixReduceRowNV, Smear);
    coopmat<float16_t, gl_ScopeWorkgroup, BC, HD, gl_MatrixUseB> v;
    coopMatLoadTensorNV(v, qkv, base + 2 * dim, sliceTensorLayoutNV(head, k0, BC, 0, HD));
    o = coopMatMulAdd(p16, v, o * factor_wide);
  }
  OUTPUT inverse;
  coopMatReduceNV(inverse, l, gl_CooperativeMatrixReduceRowNV, Smear);
  coopMatPerElementNV(inverse, inverse, Reciprocal);
  o = o * inverse;
  tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> out_layout =
      createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
  out_layout = setTensorLayoutDimensionNV(out_layout, p.seq, p.head_dim);
  out_layout = setTensorLayoutStrideNV(out_layout, dim, 1);
  coopMatStoreTensorNV(o, result, b * p.seq * dim + h * p.head_dim,
                       sliceTensorLayoutNV(out_layout, q0, BR, 0, HD));
}
