#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/cuda_check.h"
#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/rotary.h"

namespace fsdpd::cuda {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kMaxHalf = static_cast<int>(kMaxRotaryHeadDim / 2);
constexpr int kMaxThreads = 256;

struct RotaryParams {
  int64_t rows;       // batch · seq
  int64_t seq;        // a row's position is its index modulo seq
  int64_t stride;     // qkv's row: (heads + 2·kv_heads)·head_dim
  int rotated_heads;  // heads + kv_heads: q's heads, then k's, from the row's start
  int head_dim;
  int half;    // head_dim / 2
  float sign;  // of the sine: −1 for the inverse rotation
  float inv_freq[kMaxHalf];
};

// x·c − y·s and y·c + x·s rounded as the CPU rounds them: each product, then the sum.
__device__ __forceinline__ float RotateFirst(float x, float y, float c, float s) {
  return __fsub_rn(__fmul_rn(x, c), __fmul_rn(y, s));
}
__device__ __forceinline__ float RotateSecond(float x, float y, float c, float s) {
  return __fadd_rn(__fmul_rn(y, c), __fmul_rn(x, s));
}

// W values of a pair's first half and the W partners head_dim/2 further on: W = 8 moves each as
// one 16-byte access (head_dim/2 a multiple of 8, qkv 16-byte aligned), W = 1 one at a time.
template <int W>
__device__ __forceinline__ void RotateValues(bf16* first, const float* cosines, const float* sines,
                                             int half) {
  bf16* second = first + half;
  if constexpr (W == 8) {
    const Bf16x8 x = *reinterpret_cast<const Bf16x8*>(first);
    const Bf16x8 y = *reinterpret_cast<const Bf16x8*>(second);
    Bf16x8 x_out, y_out;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 a = __bfloat1622float2(x.pairs[k]);
      const float2 b = __bfloat1622float2(y.pairs[k]);
      const float c0 = cosines[2 * k], c1 = cosines[2 * k + 1];
      const float s0 = sines[2 * k], s1 = sines[2 * k + 1];
      x_out.pairs[k] =
          __floats2bfloat162_rn(RotateFirst(a.x, b.x, c0, s0), RotateFirst(a.y, b.y, c1, s1));
      y_out.pairs[k] =
          __floats2bfloat162_rn(RotateSecond(a.x, b.x, c0, s0), RotateSecond(a.y, b.y, c1, s1));
    }
    *reinterpret_cast<Bf16x8*>(first) = x_out;
    *reinterpret_cast<Bf16x8*>(second) = y_out;
  } else {
    const float a = __bfloat162float(*first);
    const float b = __bfloat162float(*second);
    *first = __float2bfloat16_rn(RotateFirst(a, b, cosines[0], sines[0]));
    *second = __float2bfloat16_rn(RotateSecond(a, b, cosines[0], sines[0]));
  }
}

// A block per row (rows stride by gridDim.x): the row's cosines and sines into shared memory,
// then each thread rotates W pairs of one q or k head at a time.
template <int W>
__global__ void __launch_bounds__(kMaxThreads) RotaryKernel(bf16* qkv, RotaryParams p) {
  __shared__ float cosines[kMaxHalf];
  __shared__ float sines[kMaxHalf];
  const int per_head = p.half / W;
  const int tasks = p.rotated_heads * per_head;
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    // As kernels/cpu/rotary.cc: the position converted to fp32, times inv_freq_i in fp32.
    const float position = static_cast<float>(row % p.seq);
    __syncthreads();  // the previous row's table is read no more
    for (int i = threadIdx.x; i < p.half; i += blockDim.x) {
      float sine, cosine;
      sincosf(__fmul_rn(position, p.inv_freq[i]), &sine, &cosine);
      cosines[i] = cosine;
      sines[i] = p.sign * sine;
    }
    __syncthreads();
    bf16* base = qkv + row * p.stride;
    for (int t = threadIdx.x; t < tasks; t += blockDim.x) {
      const int h = t / per_head;
      const int i = (t - h * per_head) * W;
      RotateValues<W>(base + h * p.head_dim + i, cosines + i, sines + i, p.half);
    }
  }
}

}  // namespace

absl::Status Rotary(bf16* qkv, const RotaryDims& dims, double theta, bool inverse,
                    cudaStream_t stream) {
  if (dims.batch < 0 || dims.seq < 0 || dims.heads <= 0 || dims.kv_heads <= 0 ||
      dims.head_dim <= 0 || dims.head_dim % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Rotary: batch ", dims.batch, ", seq ", dims.seq, ", heads ", dims.heads,
                     ", kv_heads ", dims.kv_heads, ", head_dim ", dims.head_dim,
                     ": heads, kv_heads and an even head_dim must be positive"));
  }
  if (dims.head_dim > kMaxRotaryHeadDim) {
    return absl::InvalidArgumentError(absl::StrCat("Rotary: head_dim ", dims.head_dim,
                                                   " exceeds the supported ", kMaxRotaryHeadDim,
                                                   " (attention's limit)"));
  }
  if (!(theta > 0.0)) return absl::InvalidArgumentError(absl::StrCat("Rotary: theta ", theta));
  if (dims.heads + dims.kv_heads > (int64_t{1} << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Rotary: ", dims.heads + dims.kv_heads,
                     " rotated heads a row, more than the kernel indexes"));
  }
  const int64_t rows = dims.batch * dims.seq;
  if (rows == 0) return absl::OkStatus();
  if (qkv == nullptr) return absl::InvalidArgumentError("Rotary: null qkv");

  RotaryParams params{};
  params.rows = rows;
  params.seq = dims.seq;
  params.stride = (dims.heads + 2 * dims.kv_heads) * dims.head_dim;
  params.rotated_heads = static_cast<int>(dims.heads + dims.kv_heads);
  params.head_dim = static_cast<int>(dims.head_dim);
  params.half = static_cast<int>(dims.head_dim / 2);
  params.sign = inverse ? -1.0f : 1.0f;
  // The CPU reference's expression (kernels/cpu/rotary.cc), evaluated by the same host library,
  // so both sides rotate by the same fp32 angles.
  for (int i = 0; i < params.half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(dims.head_dim);
    params.inv_freq[i] = 1.0f / std::pow(static_cast<float>(theta), exponent);
  }
  const bool vectors = params.half % 8 == 0 && Aligned16(qkv);
  const int per_row = params.rotated_heads * (vectors ? params.half / 8 : params.half);
  const int threads =
      static_cast<int>(std::clamp<int64_t>((per_row + 31) / 32 * 32, 32, kMaxThreads));
  const unsigned blocks = static_cast<unsigned>(std::min(rows, kMaxGridX));
  if (vectors) {
    RotaryKernel<8><<<blocks, threads, 0, stream>>>(qkv, params);
  } else {
    RotaryKernel<1><<<blocks, threads, 0, stream>>>(qkv, params);
  }
  CUDA_CHECK_LAUNCH("RotaryKernel");
  return absl::OkStatus();
}

}  // namespace fsdpd::cuda
