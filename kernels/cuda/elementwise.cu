#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/cuda_check.h"
#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/elementwise.h"

namespace fsdpd::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kSumBlocks = 1024;

template <typename T>
__global__ void AddKernel(const T* a, const T* b, int64_t count, T* out) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = FromFloat<T>(ToFloat(a[i]) + ToFloat(b[i]));
  }
}

// bf16 residual add eight elements at a time (16-byte accesses); out may alias a or b.
__global__ void AddBf16VectorKernel(const Bf16x8* a, const Bf16x8* b, int64_t vectors,
                                    Bf16x8* out) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < vectors;
       i += int64_t{gridDim.x} * blockDim.x) {
    const Bf16x8 left = a[i];
    const Bf16x8 right = b[i];
    Bf16x8 result;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 x = __bfloat1622float2(left.pairs[k]);
      const float2 y = __bfloat1622float2(right.pairs[k]);
      result.pairs[k] = __floats2bfloat162_rn(x.x + y.x, x.y + y.y);
    }
    out[i] = result;
  }
}

template <typename From, typename To>
__global__ void CastKernel(const From* src, int64_t count, To* dst) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    dst[i] = FromFloat<To>(ToFloat(src[i]));
  }
}

// fp32 → bf16 eight elements a thread (two 16-byte loads, one 16-byte store), no grid-stride
// loop: the gather casts a unit's master weights on the comm stream while the compute stream
// runs GEMMs that need whole SMs, and a grid of many short blocks lets a higher-priority
// stream's blocks in as each one retires, where a capped grid of long-running blocks holds its
// SMs for the whole kernel (bench/RESULTS.md, "The optimizer on the comm stream").
__global__ void CastFloatToBf16VectorKernel(const float4* src, int64_t vectors, Bf16x8* dst) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= vectors) return;
  const float4 lo = src[2 * i];
  const float4 hi = src[2 * i + 1];
  Bf16x8 out;
  out.pairs[0] = __floats2bfloat162_rn(lo.x, lo.y);
  out.pairs[1] = __floats2bfloat162_rn(lo.z, lo.w);
  out.pairs[2] = __floats2bfloat162_rn(hi.x, hi.y);
  out.pairs[3] = __floats2bfloat162_rn(hi.z, hi.w);
  dst[i] = out;
}

__global__ void RoundKernel(float* x, int64_t count) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    x[i] = __bfloat162float(__float2bfloat16_rn(x[i]));
  }
}

template <typename T>
__global__ void FillKernel(T* x, int64_t count, float value) {
  const T stored = FromFloat<T>(value);
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    x[i] = stored;
  }
}

template <typename T>
__global__ void ScaleKernel(T* x, int64_t count, float factor) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    x[i] = FromFloat<T>(ToFloat(x[i]) * factor);
  }
}

// First pass: each block's share of the grid-stride loop, summed in a fixed order.
template <typename T>
__global__ void SumOfSquaresPartialKernel(const T* x, int64_t count, float* partials) {
  __shared__ float scratch[32];
  float sum = 0.0f;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float value = ToFloat(x[i]);
    sum = fmaf(value, value, sum);
  }
  sum = BlockSum(sum, scratch);
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

__global__ void SumPartialsKernel(const float* partials, int count, float* result) {
  __shared__ float scratch[32];
  float sum = 0.0f;
  for (int i = threadIdx.x; i < count; i += blockDim.x) sum += partials[i];
  sum = BlockSum(sum, scratch);
  if (threadIdx.x == 0) *result = sum;
}

// The vectorised first pass, in the order device_common.cuh fixes for fp32 sums of squares:
// slice `block` of the vectors into partials[block].
__device__ __forceinline__ void SumOfSquaresSlice(const float4* __restrict__ x, int64_t vectors,
                                                  int64_t block, float* __restrict__ partials,
                                                  float* scratch) {
  const int64_t first = block * kSquareSumVectorsPerBlock + threadIdx.x;
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < kSquareSumVectorsPerThread; ++k) {
    const int64_t i = first + int64_t{k} * kSquareSumThreads;
    if (i < vectors) sum = AddSquares(x[i], sum);
  }
  sum = BlockSum(sum, scratch);
  if (threadIdx.x == 0) partials[block] = sum;
}

// A block per slice, or (kStrided) a capped grid whose blocks take every gridDim-th slice.
template <bool kStrided>
__global__ void SumOfSquaresVectorKernel(const float4* __restrict__ x, int64_t vectors,
                                         int64_t blocks, float* __restrict__ partials) {
  __shared__ float scratch[32];
  if constexpr (!kStrided) {
    SumOfSquaresSlice(x, vectors, blockIdx.x, partials, scratch);
  } else {
    for (int64_t block = blockIdx.x; block < blocks; block += gridDim.x) {
      SumOfSquaresSlice(x, vectors, block, partials, scratch);
      __syncthreads();  // scratch is reused by the next slice
    }
  }
}

// The partials summed as SumPartialsKernel does, then the < 4 elements past the last vector.
__global__ void FinishSquareSumKernel(const float* partials, int64_t count, const float* tail,
                                      int tail_count, float* result) {
  __shared__ float scratch[32];
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) sum += partials[i];
  sum = BlockSum(sum, scratch);
  if (threadIdx.x == 0) {
    for (int i = 0; i < tail_count; ++i) sum = fmaf(tail[i], tail[i], sum);
    *result = sum;
  }
}

absl::Status CheckCount(const char* op, const void* a, const void* b, int64_t count) {
  if (count < 0) return absl::InvalidArgumentError(absl::StrCat(op, ": negative count ", count));
  if (count > 0 && (a == nullptr || b == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": null pointer for ", count, " elements"));
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status LaunchAdd(const T* a, const T* b, int64_t count, T* out, cudaStream_t stream) {
  FSDPD_RETURN_IF_ERROR(CheckCount("Add", a, out, count));
  FSDPD_RETURN_IF_ERROR(CheckCount("Add", b, out, count));
  if (count == 0) return absl::OkStatus();
  AddKernel<<<GridFor(count, kThreads), kThreads, 0, stream>>>(a, b, count, out);
  CUDA_CHECK_LAUNCH("AddKernel");
  return absl::OkStatus();
}

template <typename From, typename To>
absl::Status LaunchCast(const From* src, int64_t count, To* dst, cudaStream_t stream) {
  FSDPD_RETURN_IF_ERROR(CheckCount("Cast", src, dst, count));
  if (count == 0) return absl::OkStatus();
  CastKernel<<<GridFor(count, kThreads), kThreads, 0, stream>>>(src, count, dst);
  CUDA_CHECK_LAUNCH("CastKernel");
  return absl::OkStatus();
}

template <typename T>
absl::Status LaunchFill(T* x, int64_t count, float value, cudaStream_t stream) {
  FSDPD_RETURN_IF_ERROR(CheckCount("Fill", x, x, count));
  if (count == 0) return absl::OkStatus();
  FillKernel<<<GridFor(count, kThreads), kThreads, 0, stream>>>(x, count, value);
  CUDA_CHECK_LAUNCH("FillKernel");
  return absl::OkStatus();
}

template <typename T>
absl::Status LaunchScale(T* x, int64_t count, float factor, cudaStream_t stream) {
  FSDPD_RETURN_IF_ERROR(CheckCount("Scale", x, x, count));
  if (count == 0) return absl::OkStatus();
  ScaleKernel<<<GridFor(count, kThreads), kThreads, 0, stream>>>(x, count, factor);
  CUDA_CHECK_LAUNCH("ScaleKernel");
  return absl::OkStatus();
}

template <typename T>
absl::Status LaunchSumOfSquares(const T* x, int64_t count, float* partials, float* result,
                                cudaStream_t stream) {
  FSDPD_RETURN_IF_ERROR(CheckCount("SumOfSquares", partials, result, 1));
  if (count > 0 && x == nullptr) {
    return absl::InvalidArgumentError("SumOfSquares: null input");
  }
  if (count < 0) return absl::InvalidArgumentError("SumOfSquares: negative count");
  // Always the same number of blocks, so the reduction order depends on the count only.
  SumOfSquaresPartialKernel<<<kSumBlocks, kThreads, 0, stream>>>(x, count, partials);
  CUDA_CHECK_LAUNCH("SumOfSquaresPartialKernel");
  SumPartialsKernel<<<1, 1024, 0, stream>>>(partials, kSumBlocks, result);
  CUDA_CHECK_LAUNCH("SumPartialsKernel");
  return absl::OkStatus();
}

}  // namespace

absl::Status AddBf16(const __nv_bfloat16* a, const __nv_bfloat16* b, int64_t count,
                     __nv_bfloat16* out, cudaStream_t stream) {
  if (count > 0 && count % 8 == 0 && Aligned16(a) && Aligned16(b) && Aligned16(out)) {
    AddBf16VectorKernel<<<GridFor(count / 8, kThreads), kThreads, 0, stream>>>(
        reinterpret_cast<const Bf16x8*>(a), reinterpret_cast<const Bf16x8*>(b), count / 8,
        reinterpret_cast<Bf16x8*>(out));
    CUDA_CHECK_LAUNCH("AddBf16VectorKernel");
    return absl::OkStatus();
  }
  return LaunchAdd(a, b, count, out, stream);
}
absl::Status AddFloat(const float* a, const float* b, int64_t count, float* out,
                      cudaStream_t stream) {
  return LaunchAdd(a, b, count, out, stream);
}
absl::Status CastFloatToBf16(const float* src, int64_t count, __nv_bfloat16* dst,
                             cudaStream_t stream) {
  FSDPD_RETURN_IF_ERROR(CheckCount("Cast", src, dst, count));
  const int64_t vectors = count / 8;
  if (vectors > 0 && vectors <= kMaxGridX * kThreads && Aligned16(src) && Aligned16(dst)) {
    CastFloatToBf16VectorKernel<<<GridFor(vectors, kThreads, kMaxGridX), kThreads, 0, stream>>>(
        reinterpret_cast<const float4*>(src), vectors, reinterpret_cast<Bf16x8*>(dst));
    CUDA_CHECK_LAUNCH("CastFloatToBf16VectorKernel");
    // The tail (fewer than eight) through the scalar kernel.
    return LaunchCast(src + vectors * 8, count - vectors * 8, dst + vectors * 8, stream);
  }
  return LaunchCast(src, count, dst, stream);
}
absl::Status CastBf16ToFloat(const __nv_bfloat16* src, int64_t count, float* dst,
                             cudaStream_t stream) {
  return LaunchCast(src, count, dst, stream);
}
absl::Status RoundFloatToBf16(float* x, int64_t count, cudaStream_t stream) {
  FSDPD_RETURN_IF_ERROR(CheckCount("RoundToBf16", x, x, count));
  if (count == 0) return absl::OkStatus();
  RoundKernel<<<GridFor(count, kThreads), kThreads, 0, stream>>>(x, count);
  CUDA_CHECK_LAUNCH("RoundKernel");
  return absl::OkStatus();
}
absl::Status FillFloat(float* x, int64_t count, float value, cudaStream_t stream) {
  return LaunchFill(x, count, value, stream);
}
absl::Status FillBf16(__nv_bfloat16* x, int64_t count, float value, cudaStream_t stream) {
  return LaunchFill(x, count, value, stream);
}
absl::Status ScaleFloat(float* x, int64_t count, float factor, cudaStream_t stream) {
  return LaunchScale(x, count, factor, stream);
}
absl::Status ScaleBf16(__nv_bfloat16* x, int64_t count, float factor, cudaStream_t stream) {
  return LaunchScale(x, count, factor, stream);
}
int64_t SumOfSquaresScratchFloats(int64_t count) {
  return std::max<int64_t>(kSumBlocks, SquareSumBlocks(count / 4));
}

absl::Status FinishSquareSum(const float* partials, int64_t partial_count, const float* tail,
                             int64_t tail_count, float* result, cudaStream_t stream) {
  if (tail_count < 0 || tail_count >= 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("FinishSquareSum: the tail must hold 0 to 3 elements, got ", tail_count));
  }
  FinishSquareSumKernel<<<1, 1024, 0, stream>>>(partials, partial_count, tail,
                                                static_cast<int>(tail_count), result);
  CUDA_CHECK_LAUNCH("FinishSquareSumKernel");
  return absl::OkStatus();
}

absl::Status SumOfSquaresFloat(const float* x, int64_t count, float* partials, float* result,
                               cudaStream_t stream, int64_t grid_limit) {
  if (count < 4 || !Aligned16(x)) return LaunchSumOfSquares(x, count, partials, result, stream);
  FSDPD_RETURN_IF_ERROR(CheckCount("SumOfSquares", partials, result, 1));
  if (grid_limit < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("SumOfSquares: negative grid limit ", grid_limit));
  }
  const int64_t vectors = count / 4;
  const int64_t blocks = SquareSumBlocks(vectors);
  const auto* vectors_in = reinterpret_cast<const float4*>(x);
  if (grid_limit > 0 && grid_limit < blocks) {
    SumOfSquaresVectorKernel<true>
        <<<static_cast<unsigned>(grid_limit), kSquareSumThreads, 0, stream>>>(vectors_in, vectors,
                                                                              blocks, partials);
  } else {
    SumOfSquaresVectorKernel<false>
        <<<static_cast<unsigned>(blocks), kSquareSumThreads, 0, stream>>>(vectors_in, vectors,
                                                                          blocks, partials);
  }
  CUDA_CHECK_LAUNCH("SumOfSquaresVectorKernel");
  return FinishSquareSum(partials, blocks, x + vectors * 4, count - vectors * 4, result, stream);
}
absl::Status SumOfSquaresBf16(const __nv_bfloat16* x, int64_t count, float* partials, float* result,
                              cudaStream_t stream) {
  return LaunchSumOfSquares(x, count, partials, result, stream);
}

}  // namespace fsdpd::cuda
