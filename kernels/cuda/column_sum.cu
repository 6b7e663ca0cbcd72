#include "base/cuda_check.h"
#include "kernels/cuda/column_sum.h"
#include "kernels/cuda/device_common.cuh"

namespace fsdpd::cuda {
namespace {

constexpr int kChunkRows = 256;
constexpr int kWarps = 8;
constexpr int kColumns = 32;  // a warp's lanes, one column each

int64_t Chunks(int64_t rows) { return (rows + kChunkRows - 1) / kChunkRows; }

// partials[chunk, c] = Σ over the chunk's rows of dout[r, c]: warp w takes rows w, w + 8, ...
// of the chunk in order, then lane c of the first warp-width of threads adds the 8 warps' sums
// in order.
__global__ void __launch_bounds__(kWarps * 32)
    ChunkColumnSumKernel(const __nv_bfloat16* dout, int64_t rows, int64_t columns,
                         float* partials) {
  __shared__ float sums[kWarps][kColumns];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t column = int64_t{blockIdx.x} * kColumns + lane;
  const int64_t first = int64_t{blockIdx.y} * kChunkRows;
  const int64_t end = min(rows, first + kChunkRows);
  float sum = 0.0f;
  if (column < columns) {
#pragma unroll 8
    for (int64_t r = first + warp; r < end; r += kWarps) {
      sum += __bfloat162float(dout[r * columns + column]);
    }
  }
  sums[warp][lane] = sum;
  __syncthreads();
  if (warp == 0 && column < columns) {
    float total = 0.0f;
    for (int w = 0; w < kWarps; ++w) total += sums[w][lane];
    partials[int64_t{blockIdx.y} * columns + column] = total;
  }
}

__global__ void FinishColumnSumKernel(const float* partials, int64_t chunks, int64_t columns,
                                      bool accumulate, float* dbias) {
  const int64_t column = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (column >= columns) return;
  float total = 0.0f;
  for (int64_t chunk = 0; chunk < chunks; ++chunk) total += partials[chunk * columns + column];
  dbias[column] = accumulate ? dbias[column] + total : total;
}

}  // namespace

int64_t ColumnSumScratchFloats(int64_t rows, int64_t columns) { return Chunks(rows) * columns; }

absl::Status ColumnSumBf16(const __nv_bfloat16* dout, int64_t rows, int64_t columns,
                           bool accumulate, float* dbias, float* partials, cudaStream_t stream) {
  if (columns <= 0) return absl::OkStatus();
  const int64_t chunks = Chunks(rows);
  if (chunks > 0) {
    const dim3 grid(static_cast<unsigned>((columns + kColumns - 1) / kColumns),
                    static_cast<unsigned>(chunks));
    if (grid.y > 65535) {
      return absl::InvalidArgumentError("ColumnSumBf16: more than 65535 chunks of 256 rows");
    }
    ChunkColumnSumKernel<<<grid, kWarps * 32, 0, stream>>>(dout, rows, columns, partials);
    CUDA_CHECK_LAUNCH("ChunkColumnSumKernel");
  }
  constexpr int kThreads = 256;
  FinishColumnSumKernel<<<static_cast<unsigned>((columns + kThreads - 1) / kThreads), kThreads, 0,
                          stream>>>(partials, chunks, columns, accumulate, dbias);
  CUDA_CHECK_LAUNCH("FinishColumnSumKernel");
  return absl::OkStatus();
}

}  // namespace fsdpd::cuda
