#version 450
// nn.Linear with workgroup-scope cooperative matrices (GL_NV_cooperative_matrix2):
// out[M, N] = x[M, K] · w[N, K]ᵀ (+ bias). The whole workgroup owns one BM×BN accumulator and
// multiplies BM×BK slices of x by BK×BN slices of wᵀ; how they are staged through shared memory
// and fed to the matrix units is the driver's, which is the point of this extension over
// matmul_coop.comp's subgroup fragments. x is fp32, rounded to fp16 after its load, or with
// -DX_F16 already fp16 (the host rounds it once with to_half.comp: every workgroup of a block
// row reads x again, so halving its bytes halves most of the matmul's memory traffic); w is
// fp16, products sum in fp32, the bias is added per element.
//
// Two paths. A block that lies wholly inside the matrices, with K a multiple of BK and rows
// 16-byte aligned (K % 8 == 0), loads through unclamped tensor layouts whose strides tell the
// compiler the alignment, UNROLL slices at a time so that the next slices' loads are issued
// before the current products retire. Any other block (the ragged edges of M and N, an odd K)
// loads through clamped layouts: loads past an edge read zeros and stores past it are dropped,
// so any M, N, K runs. The clamped loads cost bounds checks the fast path skips.
//
// With -DSTAGED (fp16 x only) the fast path stages each K slice through shared memory itself:
// every invocation loads its 16-byte vectors of the next slice into registers while the matrix
// units multiply the current slice out of shared memory, the scheme of matmul_coop.comp with
// workgroup-scope matrices, so that global latency hides behind the products.
//
// With -DWEIGHTS_INT8 (staged, fp16 x only) the weights are int8 with fp16 scales
// (edge/shaders/int8.glsl): each invocation loads 16 bytes of a row and their group's scale, and
// the stash writes fp16(q · scale) into shared memory (the one rounding fp16 weights had, as
// matmul_coop.comp's int8 blocks do), so no fp16 copy of the weights exists. The driver's tensor
// loads have no step at which to dequantize, so every block, whole or ragged, runs the staged
// loop, its loads bounded: rows, columns and K past the matrix are staged as zeros, and the
// clamped store drops outputs past it.
//
// Two probes of the staged path, which compute nothing usable and are never a matmul
// (StagedMatmulBreakdown in bench/edge_probes.cc times them; bench/edge_shaders/variants.cmake
// lists them): -DFEED_ONLY keeps every global load, shared store and barrier but multiplies
// nothing, -DNO_FEED stages one slice and then multiplies out of shared memory with every barrier
// and fragment load but no global load. Beside the whole matmul they say whether the feed or the
// products bound it.
//
// Compiled by edge/tools/glsl_to_spirv.cc (Debian 12's glslc predates the extension); the host
// uses it only where the device offers VK_NV_cooperative_matrix2 and VK_KHR_cooperative_matrix.
#extension GL_KHR_cooperative_matrix : require
#extension GL_NV_cooperative_matrix2 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_control_flow_attributes : require
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
#ifndef UNROLL
#define UNROLL 4
#endif
#ifndef THREADS
#define THREADS 256
#endif
layout(local_size_x = THREADS) in;
#ifdef X_F16
layout(std430, binding = 0) readonly buffer X { float16_t x[]; };
#define X_TYPE float16_t
#else
layout(std430, binding = 0) readonly buffer X { float x[]; };
#define X_TYPE float
#endif
#ifdef WEIGHTS_INT8
#ifndef STAGED
#error "WEIGHTS_INT8 is staged: the driver's tensor loads cannot dequantize"
#endif
#include "int8.glsl"
#else
layout(std430, binding = 1) readonly buffer W { float16_t w[]; };
layout(std430, binding = 2) readonly buffer Bias { float16_t bias[]; };
#endif
layout(std430, binding = 3) writeonly buffer Out { float result[]; };
// has_bias: non-zero for a bias; with -DWEIGHTS_INT8 int8.glsl's flags (bit 0 a bias, bit 2 fp16).
layout(push_constant) uniform Push { uint m; uint n; uint k; uint has_bias; } p;

#ifdef STAGED
#ifndef X_F16
#error "STAGED reads x as fp16"
#endif
layout(std430, binding = 0) readonly buffer X8 { uvec4 x8[]; };
#ifndef WEIGHTS_INT8
layout(std430, binding = 1) readonly buffer W8 { uvec4 w8[]; };
#endif
// Shared rows of BK + 8 halves, in 16-byte vectors: consecutive rows start in different banks
// (unpadded rows, which would fit a 128x256 block with K slice 64 in 48 KiB, ran at 40% of the
// padded block's rate on the H200: bench/RESULTS.md).
#define LDV ((BK + 8) / 8)
#define X_VECS (BM * BK / 8 / THREADS)
#ifdef WEIGHTS_INT8
#define W_VECS (BN * BK / 16 / THREADS)  // 16 int8 weights a vector
#define W_ELEMENTS 16
#else
#define W_VECS (BN * BK / 8 / THREADS)
#define W_ELEMENTS 8
#endif
#if X_VECS * 8 * THREADS != BM * BK || W_VECS * W_ELEMENTS * THREADS != BN * BK || \
    BK % W_ELEMENTS != 0
#error "STAGED: whole 16-byte vectors per invocation"
#endif
shared uvec4 x_tile[BM * LDV];  // row-major [BM][BK]
shared uvec4 w_tile[BN * LDV];  // row-major [BN][BK]: wᵀ column-major
uvec4 x_next[X_VECS];
uvec4 w_next[W_VECS];  // fp16 weights, or int8 ones (the lowest byte first)
#ifdef WEIGHTS_INT8
float w_scale[W_VECS];  // the int8 vectors' group scales
uint scale_base, groups;  // int8.glsl's ScaleBase, and a row's scales
#endif
#ifdef FEED_ONLY
uvec4 sink = uvec4(0);  // a read of each tile a slice: no load or store is optimised away
#endif

#ifdef WEIGHTS_INT8
// 8 halves of x from (row, column) on; zeros past the matrix, single halves where K % 8 ≠ 0.
uvec4 XEight(const uint row, const uint column) {
  if (row >= p.m || column >= p.k) return uvec4(0);
  if (p.k % 8 == 0) return x8[(row * p.k + column) / 8];
  uvec4 halves = uvec4(0);
  [[unroll]] for (uint j = 0; j < 4; ++j) {
    const uint a = column + 2 * j;
    const float16_t lo = a < p.k ? x[row * p.k + a] : float16_t(0.0);
    const float16_t hi = a + 1 < p.k ? x[row * p.k + a + 1] : float16_t(0.0);
    halves[j] = packFloat2x16(f16vec2(lo, hi));
  }
  return halves;
}
// 16 int8 weights of row n from column k on, and their group's scale (16 consecutive columns
// from a multiple of 16 lie in one group of 32); zeros, scale 0, past the matrix.
uvec4 QSixteen(const uint n, const uint k, out float scale) {
  scale = 0.0;
  if (n >= p.n || k >= p.k) return uvec4(0);
  scale = ScaleAt(scale_base, n * groups + k / GROUP);
  if (p.k % 16 == 0) return wq4[(n * p.k + k) / 16];
  uvec4 q = uvec4(0);
  [[unroll]] for (uint j = 0; j < 16; ++j) {
    const uint at = n * p.k + k + j;
    if (k + j < p.k) q[j / 4] |= ((wq[at / 4] >> (8 * (at % 4))) & 0xFFu) << (8 * (j % 4));
  }
  return q;
}
// Eight int8 weights times their scale, rounded to fp16 (to nearest even, as packHalf2x16
// rounds; q · scale is exact in fp32).
uvec4 Dequantized(const uint low, const uint high, const float scale) {
  const vec4 lo = Bytes4(low) * scale;
  const vec4 hi = Bytes4(high) * scale;
  return uvec4(packHalf2x16(lo.xy), packHalf2x16(lo.zw), packHalf2x16(hi.xy),
               packHalf2x16(hi.zw));
}
#endif

// The K slice at k0 of the block's rows of x and of w into registers (whole blocks only, but
// any block with -DWEIGHTS_INT8).
void Fetch(const uint row0, const uint col0, const uint k0) {
  const uint lane = gl_LocalInvocationID.x;
  [[unroll]] for (uint i = 0; i < X_VECS; ++i) {
    const uint e = lane + i * THREADS;
    const uint r = e / (BK / 8);
#ifdef WEIGHTS_INT8
    x_next[i] = XEight(row0 + r, k0 + (e - r * (BK / 8)) * 8);
#else
    x_next[i] = x8[((row0 + r) * p.k + k0) / 8 + (e - r * (BK / 8))];
#endif
  }
  [[unroll]] for (uint i = 0; i < W_VECS; ++i) {
    const uint e = lane + i * THREADS;
    const uint r = e / (BK / W_ELEMENTS);
#ifdef WEIGHTS_INT8
    w_next[i] = QSixteen(col0 + r, k0 + (e - r * (BK / 16)) * 16, w_scale[i]);
#else
    w_next[i] = w8[((col0 + r) * p.k + k0) / 8 + (e - r * (BK / 8))];
#endif
  }
}

void Stash() {
  const uint lane = gl_LocalInvocationID.x;
  [[unroll]] for (uint i = 0; i < X_VECS; ++i) {
    const uint e = lane + i * THREADS;
    const uint r = e / (BK / 8);
    x_tile[r * LDV + (e - r * (BK / 8))] = x_next[i];
  }
  [[unroll]] for (uint i = 0; i < W_VECS; ++i) {
    const uint e = lane + i * THREADS;
    const uint r = e / (BK / W_ELEMENTS);
#ifdef WEIGHTS_INT8
    const uint at = r * LDV + (e - r * (BK / 16)) * 2;  // two vectors of 8 halves
    w_tile[at] = Dequantized(w_next[i].x, w_next[i].y, w_scale[i]);
    w_tile[at + 1] = Dequantized(w_next[i].z, w_next[i].w, w_scale[i]);
#else
    w_tile[r * LDV + (e - r * (BK / 8))] = w_next[i];
#endif
  }
}
#endif

#define ACC coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>
#define X_WIDE coopmat<X_TYPE, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA>
#define X_SLICE coopmat<float16_t, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA>
#define W_SLICE coopmat<float16_t, gl_ScopeWorkgroup, BK, BN, gl_MatrixUseB>

float AddBias(const in uint row, const in uint col, const in float value, const in uint col0) {
#ifdef WEIGHTS_INT8
  return col0 + col < p.n ? value + BiasAt(col0 + col, p.has_bias) : value;
#else
  return col0 + col < p.n ? value + float(bias[col0 + col]) : value;
#endif
}

void main() {
  const uint row0 = gl_WorkGroupID.y * BM;
  const uint col0 = gl_WorkGroupID.x * BN;
  const tensorViewNV<2, false, 1, 0> transposed = createTensorViewNV(2, false, 1, 0);
  ACC acc = ACC(0.0);
#ifdef WEIGHTS_INT8
  scale_base = ScaleBase(p.n, p.k);
  groups = (p.k + GROUP - 1) / GROUP;
  const bool has_bias = (p.has_bias & FLAG_BIAS) != 0u;
  const bool staged_block = true;  // every block: the fetches are bounded
#else
  const bool has_bias = p.has_bias != 0;
  const bool staged_block = row0 + BM <= p.m && col0 + BN <= p.n && p.k % BK == 0 && p.k % 8 == 0;
#endif

  if (staged_block) {
#ifdef STAGED
    Fetch(row0, col0, 0);
#ifdef NO_FEED
    Stash();
#endif
    for (uint k0 = 0; k0 < p.k; k0 += BK) {
      barrier();  // every invocation is done reading the last slice
#ifndef NO_FEED
      Stash();
#endif
      barrier();
#ifndef NO_FEED
      if (k0 + BK < p.k) Fetch(row0, col0, k0 + BK);
#endif
#ifdef FEED_ONLY
      sink ^= x_tile[(gl_LocalInvocationID.x * 5 + k0 / BK) % (BM * LDV)] ^
              w_tile[(gl_LocalInvocationID.x * 3 + k0 / BK) % (BN * LDV)];
#else
      X_SLICE x_slice;
      coopMatLoad(x_slice, x_tile, 0, LDV, gl_CooperativeMatrixLayoutRowMajor);
      W_SLICE w_slice;
      coopMatLoad(w_slice, w_tile, 0, LDV, gl_CooperativeMatrixLayoutColumnMajor);
      acc = coopMatMulAdd(x_slice, w_slice, acc);
#endif
    }
#else
    // The fast path. Clearing the low bits of the stride is a no-op (K % 8 == 0) that lets the
    // compiler prove 16-byte aligned rows.
    const uint stride = p.k & ~7u;
    tensorLayoutNV<2> x_layout = createTensorLayoutNV(2);
    x_layout = setTensorLayoutDimensionNV(x_layout, p.m, p.k);
    x_layout = setTensorLayoutStrideNV(x_layout, stride, 1);
    tensorLayoutNV<2> w_layout = createTensorLayoutNV(2);
    w_layout = setTensorLayoutDimensionNV(w_layout, p.n, p.k);
    w_layout = setTensorLayoutStrideNV(w_layout, stride, 1);
    uint k0 = 0;
    const uint unrolled_end = p.k - p.k % (BK * UNROLL);
    for (; k0 < unrolled_end; k0 += BK * UNROLL) {
      [[unroll]] for (uint j = 0; j < UNROLL; ++j) {
        X_WIDE x_wide;
        coopMatLoadTensorNV(x_wide, x, 0, sliceTensorLayoutNV(x_layout, row0, BM, k0 + j * BK, BK));
        W_SLICE w_slice;
        coopMatLoadTensorNV(w_slice, w, 0,
                            sliceTensorLayoutNV(w_layout, col0, BN, k0 + j * BK, BK), transposed);
        acc = coopMatMulAdd(X_SLICE(x_wide), w_slice, acc);
      }
    }
    for (; k0 < p.k; k0 += BK) {
      X_WIDE x_wide;
      coopMatLoadTensorNV(x_wide, x, 0, sliceTensorLayoutNV(x_layout, row0, BM, k0, BK));
      W_SLICE w_slice;
      coopMatLoadTensorNV(w_slice, w, 0, sliceTensorLayoutNV(w_layout, col0, BN, k0, BK),
                          transposed);
      acc = coopMatMulAdd(X_SLICE(x_wide), w_slice, acc);
    }
#endif
  } else {
#ifndef WEIGHTS_INT8
    tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> x_layout =
        createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
    x_layout = setTensorLayoutDimensionNV(x_layout, p.m, p.k);
    tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> w_layout =
        createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
    w_layout = setTensorLayoutDimensionNV(w_layout, p.n, p.k);
    for (uint k0 = 0; k0 < p.k; k0 += BK) {
      X_WIDE x_wide;
      coopMatLoadTensorNV(x_wide, x, 0, sliceTensorLayoutNV(x_layout, row0, BM, k0, BK));
      W_SLICE w_slice;
      coopMatLoadTensorNV(w_slice, w, 0, sliceTensorLayoutNV(w_layout, col0, BN, k0, BK),
                          transposed);
      acc = coopMatMulAdd(X_SLICE(x_wide), w_slice, acc);
    }
#endif
  }
  if (has_bias) coopMatPerElementNV(acc, acc, AddBias, col0);
  tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> out_layout =
      createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
  out_layout = setTensorLayoutDimensionNV(out_layout, p.m, p.n);
  coopMatStoreTensorNV(acc, result, 0, sliceTensorLayoutNV(out_layout, row0, BM, col0, BN));
#ifdef FEED_ONLY
  // Never true where the probe runs (has_bias 0), which the compiler cannot know.
  if (p.has_bias == 2u) result[row0 * p.n + col0] = uintBitsToFloat(sink.x ^ sink.y ^ sink.z ^ sink.w);
#endif
}
