#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/cuda_check.h"
#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/device_common.cuh"

namespace fsdpd::cuda {
namespace {

constexpr int kThreads = 512;
constexpr int64_t kChunkLogits = int64_t{64} << 20;
constexpr int64_t kAlignment = 256;

int64_t AlignUp(int64_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

// One block per row: a max pass and a sum-of-exponentials pass over the bf16 logits in fp32,
// then the row's loss term, then (when wanted) the logits overwritten by
// gradient_scale · (softmax − one_hot(target)).
__global__ void SoftmaxCrossEntropyKernel(__nv_bfloat16* logits, const int32_t* targets,
                                          int64_t vocab, float gradient_scale, bool write_gradient,
                                          float* row_losses) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  __nv_bfloat16* values = logits + row * vocab;
  float maximum = -INFINITY;
  for (int64_t v = threadIdx.x; v < vocab; v += blockDim.x) {
    maximum = fmaxf(maximum, __bfloat162float(values[v]));
  }
  maximum = BlockMax(maximum, scratch);
  float sum = 0.0f;
  for (int64_t v = threadIdx.x; v < vocab; v += blockDim.x) {
    sum += __expf(__bfloat162float(values[v]) - maximum);
  }
  sum = BlockSum(sum, scratch);
  const float log_sum = logf(sum) + maximum;
  const int32_t target = targets[row];
  const float target_logit = __bfloat162float(values[target]);
  __syncthreads();  // every thread has read the target logit before any overwrite
  if (threadIdx.x == 0) row_losses[row] = log_sum - target_logit;
  if (!write_gradient) return;
  const float inverse_sum = 1.0f / sum;
  for (int64_t v = threadIdx.x; v < vocab; v += blockDim.x) {
    float probability = __expf(__bfloat162float(values[v]) - maximum) * inverse_sum;
    if (v == target) probability -= 1.0f;
    values[v] = __float2bfloat16_rn(probability * gradient_scale);
  }
}

// The same for a row that fits in registers (vocab a multiple of 8, at most kThreads ·
// kRowVectors · 8 logits: 32,768): each thread loads its 16-byte vectors of the row once and
// keeps them, so the max, the sum and the gradient read the row from registers rather than three
// times from memory, and every access is 16 bytes wide. On the seed's 32,000-word head the
// general kernel's 2-byte loads ran at about a quarter of the memory's rate (0.25 ms a chunk of
// 2,048 rows, bench/RESULTS.md).
constexpr int kRowVectors = 8;

__global__ void __launch_bounds__(kThreads)
    SoftmaxCrossEntropyHeldRowKernel(__nv_bfloat16* logits, const int32_t* targets, int64_t vocab,
                                     float gradient_scale, bool write_gradient, float* row_losses) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  __nv_bfloat16* values = logits + row * vocab;
  Bf16x8* row_vectors = reinterpret_cast<Bf16x8*>(values);
  const int64_t vectors = vocab / 8;
  // Read before the block's reductions (whose barriers every write comes after).
  const int32_t target = targets[row];
  const float target_logit = threadIdx.x == 0 ? __bfloat162float(values[target]) : 0.0f;
  Bf16x8 held[kRowVectors];
  float maximum = -INFINITY;
#pragma unroll
  for (int i = 0; i < kRowVectors; ++i) {
    const int64_t index = threadIdx.x + int64_t{i} * kThreads;
    if (index >= vectors) continue;
    held[i] = row_vectors[index];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 pair = __bfloat1622float2(held[i].pairs[j]);
      maximum = fmaxf(maximum, fmaxf(pair.x, pair.y));
    }
  }
  maximum = BlockMax(maximum, scratch);
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kRowVectors; ++i) {
    if (threadIdx.x + int64_t{i} * kThreads >= vectors) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 pair = __bfloat1622float2(held[i].pairs[j]);
      sum += __expf(pair.x - maximum) + __expf(pair.y - maximum);
    }
  }
  sum = BlockSum(sum, scratch);
  const float log_sum = logf(sum) + maximum;
  if (threadIdx.x == 0) row_losses[row] = log_sum - target_logit;
  if (!write_gradient) return;
  // Each thread overwrites only the vectors it loaded.
  const float inverse_sum = 1.0f / sum;
#pragma unroll
  for (int i = 0; i < kRowVectors; ++i) {
    const int64_t index = threadIdx.x + int64_t{i} * kThreads;
    if (index >= vectors) continue;
    Bf16x8 out;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 pair = __bfloat1622float2(held[i].pairs[j]);
      float first = __expf(pair.x - maximum) * inverse_sum;
      float second = __expf(pair.y - maximum) * inverse_sum;
      const int64_t column = index * 8 + 2 * j;
      if (column == target) first -= 1.0f;
      if (column + 1 == target) second -= 1.0f;
      out.pairs[j] = __floats2bfloat162_rn(first * gradient_scale, second * gradient_scale);
    }
    row_vectors[index] = out;
  }
}

// loss = Σ row_losses / tokens, summed in a fixed order.
__global__ void MeanKernel(const float* row_losses, int64_t tokens, float* loss) {
  __shared__ float scratch[32];
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < tokens; i += blockDim.x) sum += row_losses[i];
  sum = BlockSum(sum, scratch);
  if (threadIdx.x == 0) *loss = sum / static_cast<float>(tokens);
}

}  // namespace

int64_t CrossEntropyChunkRows(int64_t tokens, int64_t vocab) {
  int64_t rows = std::max<int64_t>(1, kChunkLogits / std::max<int64_t>(vocab, 1));
  if (rows >= 64) rows = rows / 64 * 64;  // whole tiles for the GEMMs
  return std::max<int64_t>(1, std::min(rows, tokens));
}

int64_t HeadCrossEntropyScratchBytes(int64_t tokens, int64_t vocab) {
  return AlignUp(CrossEntropyChunkRows(tokens, vocab) * vocab * 2) +
         AlignUp(std::max<int64_t>(tokens, 1) * 4);
}

absl::Status HeadCrossEntropy(Gemm& gemm, const __nv_bfloat16* x, const __nv_bfloat16* head,
                              const int32_t* targets, int64_t tokens, int64_t dim, int64_t vocab,
                              float loss_scale, float* loss, __nv_bfloat16* dx, float* dhead,
                              void* scratch, int64_t scratch_bytes, cudaStream_t stream) {
  if (tokens <= 0 || dim <= 0 || vocab <= 0 || tokens > 0x7fffffff) {
    return absl::InvalidArgumentError(absl::StrCat("HeadCrossEntropy: bad sizes (tokens ", tokens,
                                                   ", dim ", dim, ", vocab ", vocab, ")"));
  }
  const int64_t needed = HeadCrossEntropyScratchBytes(tokens, vocab);
  if (scratch_bytes < needed) {
    return absl::InvalidArgumentError(
        absl::StrCat("HeadCrossEntropy: scratch of ", scratch_bytes, " bytes, need ", needed));
  }
  const int64_t chunk_rows = CrossEntropyChunkRows(tokens, vocab);
  auto* logits = static_cast<__nv_bfloat16*>(scratch);
  auto* row_losses =
      reinterpret_cast<float*>(static_cast<char*>(scratch) + AlignUp(chunk_rows * vocab * 2));
  const bool write_gradient = dx != nullptr || dhead != nullptr;
  const float gradient_scale = loss_scale / static_cast<float>(tokens);
  // Rows of whole 16-byte vectors (the chunk's start is aligned) that fit in registers.
  const bool held_rows = vocab % 8 == 0 && vocab / 8 <= int64_t{kThreads} * kRowVectors;
  for (int64_t first = 0; first < tokens; first += chunk_rows) {
    const int64_t rows = std::min(chunk_rows, tokens - first);
    const __nv_bfloat16* chunk_x = x + first * dim;
    FSDPD_RETURN_IF_ERROR(
        gemm.LinearForward(chunk_x, head, nullptr, rows, vocab, dim, logits, stream));
    if (held_rows) {
      SoftmaxCrossEntropyHeldRowKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
          logits, targets + first, vocab, gradient_scale, write_gradient, row_losses + first);
      CUDA_CHECK_LAUNCH("SoftmaxCrossEntropyHeldRowKernel");
    } else {
      SoftmaxCrossEntropyKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
          logits, targets + first, vocab, gradient_scale, write_gradient, row_losses + first);
      CUDA_CHECK_LAUNCH("SoftmaxCrossEntropyKernel");
    }
    if (dx != nullptr) {
      FSDPD_RETURN_IF_ERROR(
          gemm.LinearInputGradient(logits, head, rows, vocab, dim, dx + first * dim, stream));
    }
    if (dhead != nullptr) {
      FSDPD_RETURN_IF_ERROR(
          gemm.LinearWeightGradient(logits, chunk_x, rows, vocab, dim, dhead, nullptr, stream));
    }
  }
  MeanKernel<<<1, 1024, 0, stream>>>(row_losses, tokens, loss);
  CUDA_CHECK_LAUNCH("MeanKernel");
  return absl::OkStatus();
}

}  // namespace fsdpd::cuda
