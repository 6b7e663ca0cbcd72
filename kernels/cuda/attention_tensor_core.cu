// Flash attention on tensor cores through WMMA (mma.sync 16×16×16, bf16 operands, fp32
// accumulators). A block is 4 warps; each warp owns 16 rows (queries in forward and dQ, keys in
// dK/dV) and streams 64-row tiles of the other side through shared memory. Products land in a
// per-warp fp32 scratch, where each thread owns half of one row (lane / 2, lane % 2), so the
// softmax and the accumulators use a layout we know rather than WMMA's opaque one.
// Probabilities and their gradients are rounded to bf16 before the second product of each pair,
// as FlashAttention does; row statistics stay fp32.
#include <mma.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/cuda_check.h"
#include "kernels/cuda/attention_tensor_core.cuh"
#include "kernels/cuda/device_common.cuh"

namespace fsdpd::cuda::tensor_core {
namespace {

using namespace nvcuda;
using bf16 = __nv_bfloat16;

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kBlockRows = 16 * kWarps;  // rows a block owns
constexpr int kTile = 64;                // rows of each streamed tile
constexpr int kHalf = kTile / 2;         // score columns per thread

template <int HD>
struct Layout {
  static constexpr int kLdTile = HD + 8;  // bf16 tiles, padded against bank conflicts
  static constexpr int kLdScratch = (HD > kTile ? HD : kTile) + 4;  // fp32 products
  static constexpr int kLdProbability = kTile + 8;                  // bf16 P and dS
  static constexpr int kTileElements = kBlockRows * kLdTile;
  static constexpr int kScratchFloats = 16 * kLdScratch;
  static constexpr int kProbabilityElements = 16 * kLdProbability;
};

// Rows [first, first + rows) of a head's slice, 8 bf16 at a time; rows past seq read as zero.
template <int HD>
__device__ void LoadRows(const bf16* base, int64_t row_stride, int64_t first, int64_t seq,
                         bf16* tile) {
  constexpr int kVectors = HD / 8;
  for (int index = threadIdx.x; index < kTile * kVectors; index += blockDim.x) {
    const int r = index / kVectors;
    const int c = (index % kVectors) * 8;
    const int64_t s = first + r;
    uint4 value = make_uint4(0, 0, 0, 0);
    if (s < seq) value = *reinterpret_cast<const uint4*>(base + s * row_stride + c);
    *reinterpret_cast<uint4*>(tile + r * Layout<HD>::kLdTile + c) = value;
  }
}

// k of kv head `kv` in the first row of batch b (v follows kv_dim further on).
__device__ __forceinline__ const bf16* KeyBase(const bf16* qkv, const FlashGeometry& g, int64_t b,
                                               int64_t kv, int head_dim) {
  return qkv + b * g.seq * g.stride + g.dim + kv * head_dim;
}

// out[16, 64] = a[16, HD] · bᵀ where b holds 64 rows of HD (so bᵀ is HD × 64).
template <int HD>
__device__ void MultiplyTransposed(const bf16* a, const bf16* b, float* out) {
  constexpr int ld = Layout<HD>::kLdTile;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[kTile / 16];
#pragma unroll
  for (int n = 0; n < kTile / 16; ++n) wmma::fill_fragment(acc[n], 0.0f);
#pragma unroll
  for (int k = 0; k < HD; k += 16) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a_fragment;
    wmma::load_matrix_sync(a_fragment, a + k, ld);
#pragma unroll
    for (int n = 0; n < kTile / 16; ++n) {
      wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> b_fragment;
      wmma::load_matrix_sync(b_fragment, b + n * 16 * ld + k, ld);
      wmma::mma_sync(acc[n], a_fragment, b_fragment, acc[n]);
    }
  }
#pragma unroll
  for (int n = 0; n < kTile / 16; ++n) {
    wmma::store_matrix_sync(out + n * 16, acc[n], Layout<HD>::kLdScratch, wmma::mem_row_major);
  }
}

// out[16, HD] = p[16, 64] · b[64, HD].
template <int HD>
__device__ void Multiply(const bf16* p, const bf16* b, float* out) {
#pragma unroll
  for (int n = 0; n < HD / 16; ++n) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
#pragma unroll
    for (int k = 0; k < kTile; k += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a_fragment;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> b_fragment;
      wmma::load_matrix_sync(a_fragment, p + k, Layout<HD>::kLdProbability);
      wmma::load_matrix_sync(b_fragment, b + k * Layout<HD>::kLdTile + n * 16, Layout<HD>::kLdTile);
      wmma::mma_sync(acc, a_fragment, b_fragment, acc);
    }
    wmma::store_matrix_sync(out + n * 16, acc, Layout<HD>::kLdScratch, wmma::mem_row_major);
  }
}

template <int HD>
__global__ void __launch_bounds__(kThreads)
    FlashForwardKernel(const bf16* qkv, FlashGeometry g, bool causal, bf16* out, float* lse) {
  using L = Layout<HD>;
  extern __shared__ __align__(128) unsigned char shared[];
  bf16* q_tile = reinterpret_cast<bf16*>(shared);
  bf16* k_tile = q_tile + L::kTileElements;
  bf16* v_tile = k_tile + L::kTileElements;
  float* scratch_all = reinterpret_cast<float*>(v_tile + L::kTileElements);
  bf16* probability_all = reinterpret_cast<bf16*>(scratch_all + kWarps * L::kScratchFloats);
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int row = lane / 2;
  const int half = lane % 2;
  float* scratch = scratch_all + warp * L::kScratchFloats;
  bf16* probability = probability_all + warp * L::kProbabilityElements;

  const int64_t b = blockIdx.y / g.heads;
  const int64_t h = blockIdx.y % g.heads;
  const int64_t q_first = int64_t{blockIdx.x} * kBlockRows;
  const int64_t stride = g.stride;
  const bf16* q_base = qkv + b * g.seq * stride + h * HD;
  const bf16* k_base = KeyBase(qkv, g, b, h / g.group, HD);
  const bf16* v_base = k_base + g.kv_dim;
  LoadRows<HD>(q_base, stride, q_first, g.seq, q_tile);
  const int64_t query = q_first + warp * 16 + row;

  float o[HD / 2];
#pragma unroll
  for (int d = 0; d < HD / 2; ++d) o[d] = 0.0f;
  float row_max = -INFINITY;
  float row_sum = 0.0f;
  const int64_t key_end = causal ? min(g.seq, q_first + kBlockRows) : g.seq;
  for (int64_t k_first = 0; k_first < key_end; k_first += kTile) {
    __syncthreads();
    LoadRows<HD>(k_base, stride, k_first, g.seq, k_tile);
    LoadRows<HD>(v_base, stride, k_first, g.seq, v_tile);
    __syncthreads();
    MultiplyTransposed<HD>(q_tile + warp * 16 * L::kLdTile, k_tile, scratch);
    __syncwarp();
    float s[kHalf];
    float tile_max = -INFINITY;
#pragma unroll
    for (int c = 0; c < kHalf; ++c) {
      const int64_t key = k_first + half * kHalf + c;
      const bool visible = key < g.seq && (!causal || key <= query);
      s[c] = visible ? scratch[row * L::kLdScratch + half * kHalf + c] * g.scale : -INFINITY;
      tile_max = fmaxf(tile_max, s[c]);
    }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    const float new_max = fmaxf(row_max, tile_max);
    // A row with nothing visible yet (only rows past seq) keeps zero weights.
    const float reference = new_max == -INFINITY ? 0.0f : new_max;
    const float correction = row_max == -INFINITY ? 0.0f : __expf(row_max - reference);
    float tile_sum = 0.0f;
#pragma unroll
    for (int c = 0; c < kHalf; ++c) {
      const float p = __expf(s[c] - reference);
      tile_sum += p;
      probability[row * L::kLdProbability + half * kHalf + c] = __float2bfloat16_rn(p);
    }
    tile_sum += __shfl_xor_sync(0xffffffffu, tile_sum, 1);
    row_sum = row_sum * correction + tile_sum;
    row_max = new_max;
    __syncwarp();
    Multiply<HD>(probability, v_tile, scratch);
    __syncwarp();
#pragma unroll
    for (int d = 0; d < HD / 2; ++d) {
      o[d] = o[d] * correction + scratch[row * L::kLdScratch + half * (HD / 2) + d];
    }
  }
  if (query >= g.seq) return;
  const float inverse_sum = 1.0f / row_sum;
  bf16* output = out + (b * g.seq + query) * g.dim + h * HD + half * (HD / 2);
#pragma unroll
  for (int d = 0; d < HD / 2; ++d) output[d] = __float2bfloat16_rn(o[d] * inverse_sum);
  if (half == 0) lse[(b * g.heads + h) * g.seq + query] = row_max + logf(row_sum);
}

// dq for 64 query rows, streaming key/value tiles.
template <int HD>
__global__ void __launch_bounds__(kThreads)
    FlashQueryGradientKernel(const bf16* dout, const bf16* qkv, const float* lse,
                             const float* delta, FlashGeometry g, bool causal, bf16* dqkv) {
  using L = Layout<HD>;
  extern __shared__ __align__(128) unsigned char shared[];
  bf16* q_tile = reinterpret_cast<bf16*>(shared);
  bf16* dout_tile = q_tile + L::kTileElements;
  bf16* k_tile = dout_tile + L::kTileElements;
  bf16* v_tile = k_tile + L::kTileElements;
  float* scratch_all = reinterpret_cast<float*>(v_tile + L::kTileElements);
  bf16* gradient_all = reinterpret_cast<bf16*>(scratch_all + kWarps * L::kScratchFloats);
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int row = lane / 2;
  const int half = lane % 2;
  float* scratch = scratch_all + warp * L::kScratchFloats;
  bf16* score_gradient = gradient_all + warp * L::kProbabilityElements;

  const int64_t b = blockIdx.y / g.heads;
  const int64_t h = blockIdx.y % g.heads;
  const int64_t q_first = int64_t{blockIdx.x} * kBlockRows;
  const int64_t stride = g.stride;
  const bf16* q_base = qkv + b * g.seq * stride + h * HD;
  const bf16* k_base = KeyBase(qkv, g, b, h / g.group, HD);
  const bf16* v_base = k_base + g.kv_dim;
  LoadRows<HD>(q_base, stride, q_first, g.seq, q_tile);
  LoadRows<HD>(dout + b * g.seq * g.dim + h * HD, g.dim, q_first, g.seq, dout_tile);
  const int64_t query = q_first + warp * 16 + row;
  const int64_t statistics = (b * g.heads + h) * g.seq + query;
  const float row_lse = query < g.seq ? lse[statistics] : 0.0f;
  const float row_delta = query < g.seq ? delta[statistics] : 0.0f;

  float dq[HD / 2];
#pragma unroll
  for (int d = 0; d < HD / 2; ++d) dq[d] = 0.0f;
  const int64_t key_end = causal ? min(g.seq, q_first + kBlockRows) : g.seq;
  for (int64_t k_first = 0; k_first < key_end; k_first += kTile) {
    __syncthreads();
    LoadRows<HD>(k_base, stride, k_first, g.seq, k_tile);
    LoadRows<HD>(v_base, stride, k_first, g.seq, v_tile);
    __syncthreads();
    MultiplyTransposed<HD>(q_tile + warp * 16 * L::kLdTile, k_tile, scratch);
    __syncwarp();
    float p[kHalf];
#pragma unroll
    for (int c = 0; c < kHalf; ++c) {
      const int64_t key = k_first + half * kHalf + c;
      const bool visible = query < g.seq && key < g.seq && (!causal || key <= query);
      p[c] = visible ? __expf(scratch[row * L::kLdScratch + half * kHalf + c] * g.scale - row_lse)
                     : 0.0f;
    }
    __syncwarp();
    MultiplyTransposed<HD>(dout_tile + warp * 16 * L::kLdTile, v_tile, scratch);  // dP
    __syncwarp();
#pragma unroll
    for (int c = 0; c < kHalf; ++c) {
      const float dp = scratch[row * L::kLdScratch + half * kHalf + c];
      score_gradient[row * L::kLdProbability + half * kHalf + c] =
          __float2bfloat16_rn(p[c] * (dp - row_delta));
    }
    __syncwarp();
    Multiply<HD>(score_gradient, k_tile, scratch);
    __syncwarp();
#pragma unroll
    for (int d = 0; d < HD / 2; ++d) dq[d] += scratch[row * L::kLdScratch + half * (HD / 2) + d];
  }
  if (query >= g.seq) return;
  bf16* output = dqkv + (b * g.seq + query) * stride + h * HD + half * (HD / 2);
#pragma unroll
  for (int d = 0; d < HD / 2; ++d) output[d] = __float2bfloat16_rn(dq[d] * g.scale);
}

// dk and dv for 64 key rows of one kv head, streaming query tiles (q, dout and their statistics)
// of each query head of its group in turn: the group's sum stays in registers, in a fixed order.
template <int HD>
__global__ void __launch_bounds__(kThreads)
    FlashKeyValueGradientKernel(const bf16* dout, const bf16* qkv, const float* lse,
                                const float* delta, FlashGeometry g, bool causal, bf16* dqkv) {
  using L = Layout<HD>;
  extern __shared__ __align__(128) unsigned char shared[];
  bf16* k_tile = reinterpret_cast<bf16*>(shared);
  bf16* v_tile = k_tile + L::kTileElements;
  bf16* q_tile = v_tile + L::kTileElements;
  bf16* dout_tile = q_tile + L::kTileElements;
  float* scratch_all = reinterpret_cast<float*>(dout_tile + L::kTileElements);
  bf16* probability_all = reinterpret_cast<bf16*>(scratch_all + kWarps * L::kScratchFloats);
  float* lse_tile = reinterpret_cast<float*>(probability_all + kWarps * L::kProbabilityElements);
  float* delta_tile = lse_tile + kTile;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int row = lane / 2;
  const int half = lane % 2;
  float* scratch = scratch_all + warp * L::kScratchFloats;
  bf16* probability = probability_all + warp * L::kProbabilityElements;

  const int64_t b = blockIdx.y / g.kv_heads;
  const int64_t kv = blockIdx.y % g.kv_heads;
  const int64_t k_first = int64_t{blockIdx.x} * kBlockRows;
  const int64_t stride = g.stride;
  const bf16* k_base = KeyBase(qkv, g, b, kv, HD);
  const bf16* v_base = k_base + g.kv_dim;
  LoadRows<HD>(k_base, stride, k_first, g.seq, k_tile);
  LoadRows<HD>(v_base, stride, k_first, g.seq, v_tile);
  const int64_t key = k_first + warp * 16 + row;

  float dk[HD / 2];
  float dv[HD / 2];
#pragma unroll
  for (int d = 0; d < HD / 2; ++d) dk[d] = dv[d] = 0.0f;
  for (int64_t h = kv * g.group; h < (kv + 1) * g.group; ++h) {
    const bf16* q_base = qkv + b * g.seq * stride + h * HD;
    const bf16* dout_base = dout + b * g.seq * g.dim + h * HD;
    const int64_t statistics = (b * g.heads + h) * g.seq;
    // Under the causal mask no query before the block's first key sees it.
    for (int64_t q_first = causal ? k_first : 0; q_first < g.seq; q_first += kTile) {
      __syncthreads();
      LoadRows<HD>(q_base, stride, q_first, g.seq, q_tile);
      LoadRows<HD>(dout_base, g.dim, q_first, g.seq, dout_tile);
      for (int r = threadIdx.x; r < kTile; r += blockDim.x) {
        const int64_t query = q_first + r;
        lse_tile[r] = query < g.seq ? lse[statistics + query] : 0.0f;
        delta_tile[r] = query < g.seq ? delta[statistics + query] : 0.0f;
      }
      __syncthreads();
      // Sᵀ = K·Qᵀ: this warp's 16 keys against the tile's 64 queries.
      MultiplyTransposed<HD>(k_tile + warp * 16 * L::kLdTile, q_tile, scratch);
      __syncwarp();
      float p[kHalf];
#pragma unroll
      for (int c = 0; c < kHalf; ++c) {
        const int column = half * kHalf + c;
        const int64_t query = q_first + column;
        const bool visible = key < g.seq && query < g.seq && (!causal || key <= query);
        p[c] = visible ? __expf(scratch[row * L::kLdScratch + column] * g.scale - lse_tile[column])
                       : 0.0f;
        probability[row * L::kLdProbability + column] = __float2bfloat16_rn(p[c]);
      }
      __syncwarp();
      Multiply<HD>(probability, dout_tile, scratch);  // dV += Pᵀ·dO
      __syncwarp();
#pragma unroll
      for (int d = 0; d < HD / 2; ++d) dv[d] += scratch[row * L::kLdScratch + half * (HD / 2) + d];
      __syncwarp();
      // dPᵀ = V·dOᵀ; then dSᵀ overwrites Pᵀ, which dV no longer needs (one buffer per warp keeps
      // the block small enough for two per multiprocessor).
      MultiplyTransposed<HD>(v_tile + warp * 16 * L::kLdTile, dout_tile, scratch);
      __syncwarp();
#pragma unroll
      for (int c = 0; c < kHalf; ++c) {
        const int column = half * kHalf + c;
        const float dp = scratch[row * L::kLdScratch + column];
        probability[row * L::kLdProbability + column] =
            __float2bfloat16_rn(p[c] * (dp - delta_tile[column]));
      }
      __syncwarp();
      Multiply<HD>(probability, q_tile, scratch);  // dK += dSᵀ·Q
      __syncwarp();
#pragma unroll
      for (int d = 0; d < HD / 2; ++d) dk[d] += scratch[row * L::kLdScratch + half * (HD / 2) + d];
    }
  }
  if (key >= g.seq) return;
  bf16* output = dqkv + (b * g.seq + key) * stride + g.dim + kv * HD + half * (HD / 2);
#pragma unroll
  for (int d = 0; d < HD / 2; ++d) {
    output[d] = __float2bfloat16_rn(dk[d] * g.scale);
    output[g.kv_dim + d] = __float2bfloat16_rn(dv[d]);
  }
}

template <int HD>
constexpr size_t ForwardShared() {
  using L = Layout<HD>;
  return 3 * L::kTileElements * 2 + kWarps * (L::kScratchFloats * 4 + L::kProbabilityElements * 2);
}
template <int HD>
constexpr size_t QueryGradientShared() {
  using L = Layout<HD>;
  return 4 * L::kTileElements * 2 + kWarps * (L::kScratchFloats * 4 + L::kProbabilityElements * 2);
}
template <int HD>
constexpr size_t KeyValueGradientShared() {
  using L = Layout<HD>;
  return 4 * L::kTileElements * 2 + kWarps * (L::kScratchFloats * 4 + L::kProbabilityElements * 2) +
         2 * kTile * 4;
}

// A block row per (batch, head): query heads for forward and dq, kv heads for dk and dv.
dim3 GridOf(const FlashGeometry& g, int64_t heads) {
  return dim3(static_cast<unsigned>((g.seq + kBlockRows - 1) / kBlockRows),
              static_cast<unsigned>(g.batch * heads));
}

template <int HD>
absl::Status LaunchForward(const bf16* qkv, const FlashGeometry& g, bool causal, bf16* out,
                           float* lse, cudaStream_t stream) {
  constexpr size_t shared = ForwardShared<HD>();
  CUDA_CHECK(cudaFuncSetAttribute(FlashForwardKernel<HD>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, int{shared}));
  FlashForwardKernel<HD>
      <<<GridOf(g, g.heads), kThreads, shared, stream>>>(qkv, g, causal, out, lse);
  CUDA_CHECK_LAUNCH("FlashForwardKernel");
  return absl::OkStatus();
}

template <int HD>
absl::Status LaunchBackward(const bf16* dout, const bf16* qkv, const float* lse, const float* delta,
                            const FlashGeometry& g, bool causal, bf16* dqkv, cudaStream_t stream) {
  constexpr size_t query_shared = QueryGradientShared<HD>();
  CUDA_CHECK(cudaFuncSetAttribute(FlashQueryGradientKernel<HD>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, int{query_shared}));
  FlashQueryGradientKernel<HD><<<GridOf(g, g.heads), kThreads, query_shared, stream>>>(
      dout, qkv, lse, delta, g, causal, dqkv);
  CUDA_CHECK_LAUNCH("FlashQueryGradientKernel");
  constexpr size_t key_shared = KeyValueGradientShared<HD>();
  CUDA_CHECK(cudaFuncSetAttribute(FlashKeyValueGradientKernel<HD>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, int{key_shared}));
  FlashKeyValueGradientKernel<HD><<<GridOf(g, g.kv_heads), kThreads, key_shared, stream>>>(
      dout, qkv, lse, delta, g, causal, dqkv);
  CUDA_CHECK_LAUNCH("FlashKeyValueGradientKernel");
  return absl::OkStatus();
}

}  // namespace

absl::Status Forward(const bf16* qkv, const FlashGeometry& g, int head_dim, bool causal, bf16* out,
                     float* lse, cudaStream_t stream) {
  switch (head_dim) {
    case 32:
      return LaunchForward<32>(qkv, g, causal, out, lse, stream);
    case 64:
      return LaunchForward<64>(qkv, g, causal, out, lse, stream);
    case 128:
      return LaunchForward<128>(qkv, g, causal, out, lse, stream);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("tensor-core attention: unsupported head_dim ", head_dim));
}

absl::Status Backward(const bf16* dout, const bf16* qkv, const float* lse, const float* delta,
                      const FlashGeometry& g, int head_dim, bool causal, bf16* dqkv,
                      cudaStream_t stream) {
  switch (head_dim) {
    case 32:
      return LaunchBackward<32>(dout, qkv, lse, delta, g, causal, dqkv, stream);
    case 64:
      return LaunchBackward<64>(dout, qkv, lse, delta, g, causal, dqkv, stream);
    case 128:
      return LaunchBackward<128>(dout, qkv, lse, delta, g, causal, dqkv, stream);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("tensor-core attention: unsupported head_dim ", head_dim));
}

}  // namespace fsdpd::cuda::tensor_core
