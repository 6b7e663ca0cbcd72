// The amax (max |value|) a kernel leaves beside a bf16 output that an FP8 linear layer reads
// next (kernels/cuda/fp8_linear.h), so that the layer skips a pass of its own over the operand.
// Included by .cu files only.
//
// A thread keeps the running max of |value|'s bits: a bf16 without its sign bit orders as an
// unsigned integer for every non-negative value, +inf and NaN included (a NaN's bits exceed
// +inf's), so an integer max carries both into the amax, as CastToFp8 does. The max is taken of
// the rounded bf16 values the kernel stores, so it equals what a separate pass over the output
// would find, bit for bit. BlockAmaxToGlobal then raises one device float with one atomicMax a
// block; that float must start non-negative (zeroed before the producing kernel).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace fsdpd::cuda {

// Two bf16 |value|s side by side, as the halves of an unsigned int (no sign bits).
__device__ __forceinline__ unsigned AbsBits(__nv_bfloat162 pair) {
  return *reinterpret_cast<const unsigned*>(&pair) & 0x7fff7fffu;
}

// running = the halfwise max of running and |pair|.
__device__ __forceinline__ void RaiseAmax(unsigned& running, __nv_bfloat162 pair) {
  running = __vmaxu2(running, AbsBits(pair));
}

__device__ __forceinline__ void RaiseAmax(unsigned& running, __nv_bfloat16 value) {
  RaiseAmax(running, __halves2bfloat162(value, value));
}

// The fp32 bits of the larger half of `running`.
__device__ __forceinline__ int AmaxFloatBits(unsigned running) {
  return static_cast<int>(max(running & 0xffffu, running >> 16) << 16);
}

// amax[0] = max(amax[0], the block's largest float_bits), where float_bits are the bits of a
// non-negative float (AmaxFloatBits, or __float_as_int(fabsf(x))). Every thread of the block
// calls it (it synchronises the block); amax == nullptr does nothing.
__device__ __forceinline__ void BlockAmaxToGlobal(int float_bits, float* amax) {
  if (amax == nullptr) return;
  __shared__ int warp_max[32];
  float_bits = __reduce_max_sync(0xffffffffu, float_bits);
  __syncthreads();  // warp_max may still be read by a previous call
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = float_bits;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (unsigned w = 1; w < blockDim.x / 32; ++w) float_bits = max(float_bits, warp_max[w]);
    // The amax only rises, so a block below the value already there need not touch it.
    int* target = reinterpret_cast<int*>(amax);
    if (float_bits > 0 && float_bits > *reinterpret_cast<volatile int*>(target)) {
      atomicMax(target, float_bits);
    }
  }
}

}  // namespace fsdpd::cuda
