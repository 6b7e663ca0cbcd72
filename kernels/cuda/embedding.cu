#include <cub/device/device_radix_sort.cuh>

#include "absl/strings/str_cat.h"
#include "base/cuda_check.h"
#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/embedding.h"

namespace fsdpd::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kAlignment = 256;

int64_t AlignUp(int64_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

__global__ void EmbeddingForwardKernel(const __nv_bfloat16* weight, const int32_t* tokens,
                                       int64_t dim, __nv_bfloat16* out) {
  const int64_t t = blockIdx.x;
  const __nv_bfloat16* row = weight + static_cast<int64_t>(tokens[t]) * dim;
  __nv_bfloat16* output = out + t * dim;
  for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) output[d] = row[d];
}

__global__ void IotaKernel(int32_t* values, int64_t count) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i < count) values[i] = static_cast<int32_t>(i);
}

// One block per sorted position; only the first position of each token's run does work.
__global__ void EmbeddingSegmentSumKernel(const __nv_bfloat16* dout, const int32_t* sorted_tokens,
                                          const int32_t* sorted_positions, int64_t count,
                                          int64_t dim, float* dweight) {
  const int64_t first = blockIdx.x;
  const int32_t token = sorted_tokens[first];
  if (first > 0 && sorted_tokens[first - 1] == token) return;
  int64_t end = first + 1;
  while (end < count && sorted_tokens[end] == token) ++end;
  float* row = dweight + static_cast<int64_t>(token) * dim;
  for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) {
    float sum = 0.0f;
    for (int64_t i = first; i < end; ++i) {
      sum += __bfloat162float(dout[static_cast<int64_t>(sorted_positions[i]) * dim + d]);
    }
    row[d] += sum;
  }
}

size_t SortTempBytes(int64_t count) {
  size_t bytes = 0;
  cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const int32_t*>(nullptr),
                                  static_cast<int32_t*>(nullptr),
                                  static_cast<const int32_t*>(nullptr),
                                  static_cast<int32_t*>(nullptr), static_cast<int>(count));
  return bytes;
}

int BitsFor(int64_t vocab) {
  int bits = 1;
  while (bits < 31 && (int64_t{1} << bits) < vocab) ++bits;
  return bits;
}

}  // namespace

absl::Status EmbeddingForward(const __nv_bfloat16* weight, const int32_t* tokens, int64_t count,
                              int64_t dim, __nv_bfloat16* out, cudaStream_t stream) {
  if (count < 0 || dim <= 0 || count > 0x7fffffff) {
    return absl::InvalidArgumentError(
        absl::StrCat("EmbeddingForward: bad sizes (count ", count, ", dim ", dim, ")"));
  }
  if (count == 0) return absl::OkStatus();
  EmbeddingForwardKernel<<<static_cast<unsigned>(count), kThreads, 0, stream>>>(weight, tokens, dim,
                                                                                out);
  CUDA_CHECK_LAUNCH("EmbeddingForwardKernel");
  return absl::OkStatus();
}

int64_t EmbeddingBackwardScratchBytes(int64_t count) {
  const int64_t ids = AlignUp(std::max<int64_t>(count, 1) * 4);
  return 3 * ids + AlignUp(static_cast<int64_t>(SortTempBytes(count)));
}

absl::Status EmbeddingBackward(const __nv_bfloat16* dout, const int32_t* tokens, int64_t count,
                               int64_t dim, int64_t vocab, float* dweight, void* scratch,
                               int64_t scratch_bytes, cudaStream_t stream) {
  if (count < 0 || dim <= 0 || vocab <= 0 || count > 0x7fffffff || vocab > 0x7fffffff) {
    return absl::InvalidArgumentError(absl::StrCat("EmbeddingBackward: bad sizes (count ", count,
                                                   ", dim ", dim, ", vocab ", vocab, ")"));
  }
  if (count == 0) return absl::OkStatus();
  const int64_t needed = EmbeddingBackwardScratchBytes(count);
  if (scratch_bytes < needed) {
    return absl::InvalidArgumentError(
        absl::StrCat("EmbeddingBackward: scratch of ", scratch_bytes, " bytes, need ", needed));
  }
  const int64_t ids = AlignUp(count * 4);
  char* base = static_cast<char*>(scratch);
  int32_t* sorted_tokens = reinterpret_cast<int32_t*>(base);
  int32_t* positions = reinterpret_cast<int32_t*>(base + ids);
  int32_t* sorted_positions = reinterpret_cast<int32_t*>(base + 2 * ids);
  void* sort_temp = base + 3 * ids;
  size_t sort_bytes = static_cast<size_t>(needed - 3 * ids);

  IotaKernel<<<static_cast<unsigned>((count + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      positions, count);
  CUDA_CHECK_LAUNCH("IotaKernel");
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(sort_temp, sort_bytes, tokens, sorted_tokens,
                                             positions, sorted_positions, static_cast<int>(count),
                                             0, BitsFor(vocab), stream));
  EmbeddingSegmentSumKernel<<<static_cast<unsigned>(count), kThreads, 0, stream>>>(
      dout, sorted_tokens, sorted_positions, count, dim, dweight);
  CUDA_CHECK_LAUNCH("EmbeddingSegmentSumKernel");
  return absl::OkStatus();
}

}  // namespace fsdpd::cuda
