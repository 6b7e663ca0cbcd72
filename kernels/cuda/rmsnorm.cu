#include <algorithm>
#include <initializer_list>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "base/cuda_check.h"
#include "kernels/cuda/amax.cuh"
#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/rmsnorm.h"

namespace fsdpd::cuda {
namespace {

constexpr int kThreads = 256;
// Blocks of the backward pass; each keeps one row of weight-gradient partial sums.
constexpr int64_t kBackwardBlocks = 528;  // 4 per SM on an H100/H200: enough loads in flight

__global__ void RmsNormForwardKernel(const __nv_bfloat16* x, const __nv_bfloat16* weight,
                                     int64_t dim, float eps, __nv_bfloat16* out, float* rstd,
                                     float* out_amax) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const __nv_bfloat16* input = x + row * dim;
  float sum = 0.0f;
  for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) {
    const float value = __bfloat162float(input[d]);
    sum = fmaf(value, value, sum);
  }
  sum = BlockSum(sum, scratch);
  const float inverse_rms = rsqrtf(sum / static_cast<float>(dim) + eps);
  if (threadIdx.x == 0) rstd[row] = inverse_rms;
  __nv_bfloat16* output = out + row * dim;
  unsigned amax_bits = 0;
  for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) {
    output[d] =
        __float2bfloat16_rn(__bfloat162float(input[d]) * inverse_rms * __bfloat162float(weight[d]));
    RaiseAmax(amax_bits, output[d]);
  }
  BlockAmaxToGlobal(AmaxFloatBits(amax_bits), out_amax);
}

__global__ void RmsNormBackwardKernel(const __nv_bfloat16* dout, const __nv_bfloat16* x,
                                      const __nv_bfloat16* weight, const float* rstd, int64_t rows,
                                      int64_t dim, bool accumulate, __nv_bfloat16* dx,
                                      float* partials, float* dx_amax) {
  __shared__ float scratch[32];
  unsigned amax_bits = 0;
  float* partial = partials + blockIdx.x * dim;
  for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) partial[d] = 0.0f;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const __nv_bfloat16* input = x + row * dim;
    const __nv_bfloat16* gradient = dout + row * dim;
    const float inverse_rms = rstd[row];
    float projection = 0.0f;
    for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) {
      const float g = __bfloat162float(gradient[d]);
      const float value = __bfloat162float(input[d]);
      projection = fmaf(g * __bfloat162float(weight[d]), value, projection);
      partial[d] = fmaf(g * value, inverse_rms, partial[d]);
    }
    projection = BlockSum(projection, scratch);
    const float correction =
        projection * inverse_rms * inverse_rms * inverse_rms / static_cast<float>(dim);
    __nv_bfloat16* input_gradient = dx + row * dim;
    for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) {
      const float g = __bfloat162float(gradient[d]);
      const float prior = accumulate ? __bfloat162float(input_gradient[d]) : 0.0f;
      input_gradient[d] =
          __float2bfloat16_rn(prior + (inverse_rms * g * __bfloat162float(weight[d]) -
                                       __bfloat162float(input[d]) * correction));
      RaiseAmax(amax_bits, input_gradient[d]);
    }
  }
  BlockAmaxToGlobal(AmaxFloatBits(amax_bits), dx_amax);
}

// Vectorised variants for rows of at most kThreads · 8 · kMaxChunks values, dim a multiple of 8
// and 16-byte aligned tensors: each thread holds its chunks of 8 values in registers, so a row is
// read from memory once, and the backward keeps its weight-gradient partial sums in registers
// across rows instead of read-modify-writing them in global memory for every row.
constexpr int kMaxChunks = 4;

__device__ __forceinline__ void Unpack(const Bf16x8& packed, float (&values)[8]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 pair = __bfloat1622float2(packed.pairs[i]);
    values[2 * i] = pair.x;
    values[2 * i + 1] = pair.y;
  }
}

__device__ __forceinline__ Bf16x8 Pack(const float (&values)[8]) {
  Bf16x8 packed;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    packed.pairs[i] = __floats2bfloat162_rn(values[2 * i], values[2 * i + 1]);
  }
  return packed;
}

template <int kChunks>
__global__ void RmsNormForwardVectorKernel(const Bf16x8* x, const Bf16x8* weight, int64_t chunks,
                                           float inverse_dim, float eps, Bf16x8* out, float* rstd,
                                           float* out_amax) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  float values[kChunks][8];
  float sum = 0.0f;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int64_t chunk = c * int64_t{blockDim.x} + threadIdx.x;
    if (chunk < chunks) {
      Unpack(x[row * chunks + chunk], values[c]);
#pragma unroll
      for (int i = 0; i < 8; ++i) sum = fmaf(values[c][i], values[c][i], sum);
    }
  }
  sum = BlockSum(sum, scratch);
  const float inverse_rms = rsqrtf(sum * inverse_dim + eps);
  if (threadIdx.x == 0) rstd[row] = inverse_rms;
  unsigned amax_bits = 0;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int64_t chunk = c * int64_t{blockDim.x} + threadIdx.x;
    if (chunk < chunks) {
      float scale[8];
      Unpack(weight[chunk], scale);
#pragma unroll
      for (int i = 0; i < 8; ++i) values[c][i] = values[c][i] * inverse_rms * scale[i];
      const Bf16x8 packed = Pack(values[c]);
      out[row * chunks + chunk] = packed;
#pragma unroll
      for (int i = 0; i < 4; ++i) RaiseAmax(amax_bits, packed.pairs[i]);
    }
  }
  BlockAmaxToGlobal(AmaxFloatBits(amax_bits), out_amax);
}

// Calls launch(std::integral_constant<int, K>{}) with K = value, for 1 ≤ value ≤ kMax: the
// kernels' per-thread chunk counts are template arguments, so the registers hold whole rows.
template <int kMax, typename Launch>
void WithConstant(int value, Launch&& launch) {
  if constexpr (kMax > 1) {
    if (value < kMax) {
      WithConstant<kMax - 1>(value, launch);
      return;
    }
  }
  launch(std::integral_constant<int, kMax>{});
}

// One row's chunks of x and dout for RmsNormBackwardVectorKernel, kept packed (bf16) so that a
// second row fits in registers beside the one being computed.
template <int kChunks>
struct PackedRow {
  Bf16x8 x[kChunks];
  Bf16x8 dout[kChunks];
  float rstd;
};

template <int kChunks>
__device__ __forceinline__ void LoadRow(const Bf16x8* x, const Bf16x8* dout, const float* rstd,
                                        int64_t row, int64_t chunks, PackedRow<kChunks>& out) {
  out.rstd = rstd[row];
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int64_t chunk = c * int64_t{blockDim.x} + threadIdx.x;
    if (chunk < chunks) {
      out.x[c] = x[row * chunks + chunk];
      out.dout[c] = dout[row * chunks + chunk];
    }
  }
}

// Each block walks rows blockIdx.x, blockIdx.x + gridDim.x, ...; the next row's loads are issued
// before this row's block-wide sum, so every thread has memory requests in flight while the
// block waits at the reduction. With kAccumulate, dx is added to (the residual stream's
// gradient) instead of overwritten, which saves the model a separate residual add.
template <int kChunks, bool kAccumulate>
__global__ void RmsNormBackwardVectorKernel(const Bf16x8* dout, const Bf16x8* x,
                                            const Bf16x8* weight, const float* rstd, int64_t rows,
                                            int64_t chunks, float inverse_dim, Bf16x8* dx,
                                            float* partials, float* dx_amax) {
  __shared__ float scratch[32];
  unsigned amax_bits = 0;
  float scale[kChunks][8];
  float partial[kChunks][8];
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int64_t chunk = c * int64_t{blockDim.x} + threadIdx.x;
    if (chunk < chunks) Unpack(weight[chunk], scale[c]);
#pragma unroll
    for (int i = 0; i < 8; ++i) partial[c][i] = 0.0f;
  }
  PackedRow<kChunks> next;
  if (blockIdx.x < rows) LoadRow(x, dout, rstd, blockIdx.x, chunks, next);
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const PackedRow<kChunks> current = next;
    if (row + gridDim.x < rows) LoadRow(x, dout, rstd, row + gridDim.x, chunks, next);
    const float inverse_rms = current.rstd;
    float projection = 0.0f;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int64_t chunk = c * int64_t{blockDim.x} + threadIdx.x;
      if (chunk < chunks) {
        float input[8], gradient[8];
        Unpack(current.x[c], input);
        Unpack(current.dout[c], gradient);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          projection = fmaf(gradient[i] * scale[c][i], input[i], projection);
          partial[c][i] = fmaf(gradient[i] * input[i], inverse_rms, partial[c][i]);
        }
      }
    }
    projection = BlockSum(projection, scratch);
    const float correction = projection * inverse_rms * inverse_rms * inverse_rms * inverse_dim;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int64_t chunk = c * int64_t{blockDim.x} + threadIdx.x;
      if (chunk < chunks) {
        float input[8], gradient[8], result[8];
        Unpack(current.x[c], input);
        Unpack(current.dout[c], gradient);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          result[i] = inverse_rms * gradient[i] * scale[c][i] - input[i] * correction;
        }
        if constexpr (kAccumulate) {
          float prior[8];
          Unpack(dx[row * chunks + chunk], prior);
#pragma unroll
          for (int i = 0; i < 8; ++i) result[i] += prior[i];
        }
        const Bf16x8 packed = Pack(result);
        dx[row * chunks + chunk] = packed;
#pragma unroll
        for (int i = 0; i < 4; ++i) RaiseAmax(amax_bits, packed.pairs[i]);
      }
    }
  }
  float* block_partial = partials + blockIdx.x * chunks * 8;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int64_t chunk = c * int64_t{blockDim.x} + threadIdx.x;
    if (chunk < chunks) {
#pragma unroll
      for (int i = 0; i < 8; ++i) block_partial[chunk * 8 + i] = partial[c][i];
    }
  }
  BlockAmaxToGlobal(AmaxFloatBits(amax_bits), dx_amax);
}

// The chunks of 8 per thread a vectorised kernel needs, or 0 when the scalar kernels must run.
int VectorChunks(int64_t dim, std::initializer_list<const void*> pointers) {
  if (dim % 8 != 0 || dim > int64_t{kThreads} * 8 * kMaxChunks) return 0;
  for (const void* pointer : pointers) {
    if (!Aligned16(pointer)) return 0;
  }
  return static_cast<int>((dim / 8 + kThreads - 1) / kThreads);
}

// dweight[d] (+)= Σ_b partials[b, d] in a fixed order: a block takes kSumColumns columns, each of
// its kSumSlices warps sums every kSumSlices-th partial row of them, and one warp adds the
// slices' sums in slice order. Deterministic, and wide enough to keep loads in flight (a thread
// per column alone left the GPU mostly idle on 528 dependent loads a thread).
constexpr int kSumColumns = 32;
constexpr int kSumSlices = 16;

__global__ void SumPartialRowsKernel(const float* partials, int64_t blocks, int64_t dim,
                                     bool accumulate, float* dweight) {
  __shared__ float sums[kSumSlices][kSumColumns];
  const int column = threadIdx.x % kSumColumns;
  const int slice = threadIdx.x / kSumColumns;
  const int64_t d = blockIdx.x * int64_t{kSumColumns} + column;
  float sum = 0.0f;
  if (d < dim) {
    for (int64_t b = slice; b < blocks; b += kSumSlices) sum += partials[b * dim + d];
  }
  sums[slice][column] = sum;
  __syncthreads();
  if (slice == 0 && d < dim) {
    float total = 0.0f;
#pragma unroll
    for (int s = 0; s < kSumSlices; ++s) total += sums[s][column];
    dweight[d] = accumulate ? dweight[d] + total : total;
  }
}

absl::Status CheckShape(const char* op, int64_t rows, int64_t dim) {
  if (rows < 0 || dim <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": rows must be >= 0 and dim > 0, got ", rows, " and ", dim));
  }
  if (rows > 0x7fffffff) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": too many rows: ", rows));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RmsNormForward(const __nv_bfloat16* x, const __nv_bfloat16* weight, int64_t rows,
                            int64_t dim, float eps, __nv_bfloat16* out, float* rstd,
                            float* out_amax, cudaStream_t stream) {
  FSDPD_RETURN_IF_ERROR(CheckShape("RmsNormForward", rows, dim));
  if (rows == 0) return absl::OkStatus();
  const unsigned grid = static_cast<unsigned>(rows);
  const auto* x8 = reinterpret_cast<const Bf16x8*>(x);
  const auto* weight8 = reinterpret_cast<const Bf16x8*>(weight);
  auto* out8 = reinterpret_cast<Bf16x8*>(out);
  const float inverse_dim = 1.0f / static_cast<float>(dim);
  const int chunks = VectorChunks(dim, {x, weight, out});
  if (chunks > 0) {
    WithConstant<kMaxChunks>(chunks, [&](auto k) {
      RmsNormForwardVectorKernel<decltype(k)::value><<<grid, kThreads, 0, stream>>>(
          x8, weight8, dim / 8, inverse_dim, eps, out8, rstd, out_amax);
    });
  } else {
    RmsNormForwardKernel<<<grid, kThreads, 0, stream>>>(x, weight, dim, eps, out, rstd, out_amax);
  }
  CUDA_CHECK_LAUNCH("RmsNormForwardKernel");
  return absl::OkStatus();
}

int64_t RmsNormBackwardScratchFloats(int64_t rows, int64_t dim) {
  return std::max<int64_t>(1, std::min(rows, kBackwardBlocks)) * dim;
}

absl::Status RmsNormBackward(const __nv_bfloat16* dout, const __nv_bfloat16* x,
                             const __nv_bfloat16* weight, const float* rstd, int64_t rows,
                             int64_t dim, bool accumulate_dx, __nv_bfloat16* dx, float* dweight,
                             bool accumulate_dweight, float* scratch, float* dx_amax,
                             cudaStream_t stream) {
  FSDPD_RETURN_IF_ERROR(CheckShape("RmsNormBackward", rows, dim));
  if (rows == 0) return absl::OkStatus();
  const int64_t blocks = std::min(rows, kBackwardBlocks);
  const unsigned grid = static_cast<unsigned>(blocks);
  const auto* dout8 = reinterpret_cast<const Bf16x8*>(dout);
  const auto* x8 = reinterpret_cast<const Bf16x8*>(x);
  const auto* weight8 = reinterpret_cast<const Bf16x8*>(weight);
  auto* dx8 = reinterpret_cast<Bf16x8*>(dx);
  const float inverse_dim = 1.0f / static_cast<float>(dim);
  const int chunks = VectorChunks(dim, {dout, x, weight, dx});
  if (chunks > 0) {
    WithConstant<kMaxChunks>(chunks, [&](auto k) {
      constexpr int kChunks = decltype(k)::value;
      if (accumulate_dx) {
        RmsNormBackwardVectorKernel<kChunks, true><<<grid, kThreads, 0, stream>>>(
            dout8, x8, weight8, rstd, rows, dim / 8, inverse_dim, dx8, scratch, dx_amax);
      } else {
        RmsNormBackwardVectorKernel<kChunks, false><<<grid, kThreads, 0, stream>>>(
            dout8, x8, weight8, rstd, rows, dim / 8, inverse_dim, dx8, scratch, dx_amax);
      }
    });
  } else {
    RmsNormBackwardKernel<<<grid, kThreads, 0, stream>>>(dout, x, weight, rstd, rows, dim,
                                                         accumulate_dx, dx, scratch, dx_amax);
  }
  CUDA_CHECK_LAUNCH("RmsNormBackwardKernel");
  SumPartialRowsKernel<<<static_cast<unsigned>((dim + kSumColumns - 1) / kSumColumns),
                         kSumColumns * kSumSlices, 0, stream>>>(scratch, blocks, dim,
                                                                accumulate_dweight, dweight);
  CUDA_CHECK_LAUNCH("SumPartialRowsKernel");
  return absl::OkStatus();
}

}  // namespace fsdpd::cuda
