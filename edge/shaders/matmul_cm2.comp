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
layout(std430, binding = 1) readonly buffer W { float16_t w[]; };
layout(std430, binding = 2) readonly buffer Bias { float16_t bias[]; };
layout(std430, binding = 3) writeonly buffer Out { float result[]; };
layout(push_constant) uniform Push { uint m; uint n; uint k; uint has_bias; } p;

#ifdef STAGED
#ifndef X_F16
#error "STAGED reads x as fp16"
#endif
layout(std430, binding = 0) readonly buffer X8 { uvec4 x8[]; };
layout(std430, binding = 1) readonly buffer W8 { uvec4 w8[]; };
// Shared rows of BK + 8 halves, in 16-byte vectors: consecutive rows start in different banks
// (unpadded rows, which would fit a 128x256 block with K slice 64 in 48 KiB, ran at 40% of the
// padded block's rate on the H200: bench/RESULTS.md).
#define LDV ((BK + 8) / 8)
#define X_VECS (BM * BK / 8 / THREADS)
#define W_VECS (BN * BK / 8 / THREADS)
#if X_VECS * 8 * THREADS != BM * BK || W_VECS * 8 * THREADS != BN * BK
#error "STAGED: whole 16-byte vectors per invocation"
#endif
shared uvec4 x_tile[BM * LDV];  // row-major [BM][BK]
shared uvec4 w_tile[BN * LDV];  // row-major [BN][BK]: wᵀ column-major
uvec4 x_next[X_VECS];
uvec4 w_next[W_VECS];
#ifdef FEED_ONLY
uvec4 sink = uvec4(0);  // a read of each tile a slice: no load or store is optimised away
#endif

// The K slice at k0 of the block's rows of x and of w into registers (whole blocks only).
void Fetch(const uint row0, const uint col0, const uint k0) {
  const uint lane = gl_LocalInvocationID.x;
  [[unroll]] for (uint i = 0; i < X_VECS; ++i) {
    const uint e = lane + i * THREADS;
    const uint r = e / (BK / 8);
    x_next[i] = x8[((row0 + r) * p.k + k0) / 8 + (e - r * (BK / 8))];
  }
  [[unroll]] for (uint i = 0; i < W_VECS; ++i) {
    const uint e = lane + i * THREADS;
    const uint r = e / (BK / 8);
    w_next[i] = w8[((col0 + r) * p.k + k0) / 8 + (e - r * (BK / 8))];
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
    const uint r = e / (BK / 8);
    w_tile[r * LDV + (e - r * (BK / 8))] = w_next[i];
  }
}
#endif

#define ACC coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>
#define X_WIDE coopmat<X_TYPE, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA>
#define X_SLICE coopmat<float16_t, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA>
#define W_SLICE coopmat<float16_t, gl_ScopeWorkgroup, BK, BN, gl_MatrixUseB>

float AddBias(const in uint row, const in uint col, const in float value, const in uint col0) {
  return col0 + col < p.n ? value + float(bias[col0 + col]) : value;
}

void main() {
  const uint row0 = gl_WorkGroupID.y * BM;
  const uint col0 = gl_WorkGroupID.x * BN;
  const tensorViewNV<2, false, 1, 0> transposed = createTensorViewNV(2, false, 1, 0);
  ACC acc = ACC(0.0);

  if (row0 + BM <= p.m && col0 + BN <= p.n && p.k % BK == 0 && p.k % 8 == 0) {
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
  }
  if (p.has_bias != 0) coopMatPerElementNV(acc, acc, AddBias, col0);
  tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> out_layout =
      createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
  out_layout = setTensorLayoutDimensionNV(out_layout, p.m, p.n);
  coopMatStoreTensorNV(acc, result, 0, sliceTensorLayoutNV(out_layout, row0, BM, col0, BN));
#ifdef FEED_ONLY
  // Never true where the probe runs (has_bias 0), which the compiler cannot know.
  if (p.has_bias == 2u) result[row0 * p.n + col0] = uintBitsToFloat(sink.x ^ sink.y ^ sink.z ^ sink.w);
#endif
}
