// Device-side helpers shared by the kernel families (included by .cu files only).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
#include "base/status_macros.h"

namespace fsdpd::cuda {

// Loads and stores that let one kernel body serve fp32 and bf16 tensors.
__device__ __forceinline__ float ToFloat(float value) { return value; }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 value) { return __bfloat162float(value); }
template <typename T>
__device__ __forceinline__ T FromFloat(float value);
template <>
__device__ __forceinline__ float FromFloat<float>(float value) {
  return value;
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float value) {
  return __float2bfloat16_rn(value);
}

__device__ __forceinline__ float WarpSum(float value) {
  for (int offset = 16; offset > 0; offset /= 2) {
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  }
  return value;
}

__device__ __forceinline__ float WarpMax(float value) {
  for (int offset = 16; offset > 0; offset /= 2) {
    value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
  }
  return value;
}

// Sum over the whole block, returned to every thread. `scratch` holds 32 floats; the block is a
// multiple of 32 threads. The order of additions is fixed, so results are reproducible.
__device__ __forceinline__ float BlockSum(float value, float* scratch) {
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int warps = blockDim.x / 32;
  value = WarpSum(value);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = value;
  __syncthreads();
  value = lane < warps ? scratch[lane] : 0.0f;
  return WarpSum(value);
}

__device__ __forceinline__ float BlockMax(float value, float* scratch) {
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int warps = blockDim.x / 32;
  value = WarpMax(value);
  __syncthreads();
  if (lane == 0) scratch[warp] = value;
  __syncthreads();
  value = lane < warps ? scratch[lane] : -INFINITY;
  return WarpMax(value);
}

// Eight bf16 values moved as one 16-byte access.
struct alignas(16) Bf16x8 {
  __nv_bfloat162 pairs[4];
};

// fp32 sums of squares over float4 vectors, alone (SumOfSquaresFloat) or inside AdamW's pass
// (AdamWStepWithSquareSum), take the same order so that both give the same bits: short blocks of
// kSquareSumThreads threads, block b owning vectors [b, b + 1) × kSquareSumVectorsPerBlock and
// thread t of it vectors t, t + kSquareSumThreads, ... of that range, summed lane by lane
// (AddSquares); then BlockSum gives the block's partial, and FinishSquareSum
// (kernels/cuda/elementwise.h) sums the partials. Short blocks, not a grid-stride loop: AdamW's
// pass runs at its own rate only so (bench/RESULTS.md, "The gradient norm from AdamW's own pass").
constexpr int kSquareSumThreads = 256;
constexpr int kSquareSumVectorsPerThread = 4;
constexpr int64_t kSquareSumVectorsPerBlock =
    int64_t{kSquareSumThreads} * kSquareSumVectorsPerThread;

inline int64_t SquareSumBlocks(int64_t vectors) {
  return std::max<int64_t>(1,
                           (vectors + kSquareSumVectorsPerBlock - 1) / kSquareSumVectorsPerBlock);
}

__device__ __forceinline__ float AddSquares(const float4& v, float sum) {
  sum = fmaf(v.x, v.x, sum);
  sum = fmaf(v.y, v.y, sum);
  sum = fmaf(v.z, v.z, sum);
  return fmaf(v.w, v.w, sum);
}

inline bool Aligned16(const void* pointer) {
  return reinterpret_cast<uintptr_t>(pointer) % 16 == 0;
}

// The most blocks a one-dimensional grid may have: GridFor(count, threads, kMaxGridX) gives one
// element (or vector) a thread in many short blocks, for the kernels that share the device with
// another stream's GEMMs (see CastFloatToBf16VectorKernel in elementwise.cu).
constexpr int64_t kMaxGridX = (int64_t{1} << 31) - 1;

// Grid size for a grid-stride loop over `count` elements.
inline unsigned GridFor(int64_t count, int threads, int64_t max_blocks = 132 * 16) {
  int64_t blocks = (count + threads - 1) / threads;
  if (blocks < 1) blocks = 1;
  if (blocks > max_blocks) blocks = max_blocks;
  return static_cast<unsigned>(blocks);
}

}  // namespace fsdpd::cuda
