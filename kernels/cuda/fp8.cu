#include <cuda_fp8.h>

#include <cfloat>

#include "absl/strings/str_cat.h"
#include "base/cuda_check.h"
#include "kernels/cuda/amax.cuh"
#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/fp8.h"

namespace fsdpd::cuda {
namespace {

// A block casts a kTile × kTile tile: first row by row, each thread a chunk of 16 values of one
// row (two 16-byte loads of bf16, one 16-byte store of fp8), kept in shared memory; then, for the
// transpose, column by column, each thread 16 values of one column gathered from shared memory
// into one 16-byte store. Reading a column, the 32 threads of a warp read 32 neighbouring bytes
// of one tile row: no bank conflicts, so the tile needs no padding.
constexpr int kTile = 64;
constexpr int kChunk = 16;
constexpr int kChunksPerRow = kTile / kChunk;
constexpr int kCastThreads = kTile * kChunksPerRow;  // 256: one chunk a thread in each phase

template <__nv_fp8_interpretation_t kKind, bool kWrite>
__global__ void __launch_bounds__(kCastThreads)
    CastToFp8Kernel(const __nv_bfloat16* in, int64_t rows, int64_t cols, const float* scale,
                    uint8_t* out, uint8_t* out_transposed, float* amax) {
  __shared__ __align__(16) uint8_t tile[kTile][kTile];
  const int64_t row0 = int64_t{blockIdx.y} * kTile;
  const int64_t col0 = int64_t{blockIdx.x} * kTile;

  // Row phase. |x|'s bits order as integers for every non-negative float, +inf and NaN
  // included (a NaN's bits exceed +inf's), so an integer max propagates both to the amax.
  const int tile_row = threadIdx.x / kChunksPerRow;
  const int tile_col = (threadIdx.x % kChunksPerRow) * kChunk;
  const int64_t r = row0 + tile_row;
  const int64_t c = col0 + tile_col;
  int max_bits = 0;
  if (r < rows && c < cols) {
    const uint4* source = reinterpret_cast<const uint4*>(in + r * cols + c);
    uint4 loaded[2] = {source[0], source[1]};
    const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(loaded);
    const float s = kWrite ? *scale : 0.0f;
    uint4 packed;
    __nv_fp8x2_storage_t* quantized = reinterpret_cast<__nv_fp8x2_storage_t*>(&packed);
#pragma unroll
    for (int i = 0; i < kChunk / 2; ++i) {
      const float2 v = __bfloat1622float2(pairs[i]);
      max_bits = max(max_bits, max(__float_as_int(fabsf(v.x)), __float_as_int(fabsf(v.y))));
      if (kWrite) {
        quantized[i] = __nv_cvt_float2_to_fp8x2(make_float2(__fmul_rn(v.x, s), __fmul_rn(v.y, s)),
                                                __NV_SATFINITE, kKind);
      }
    }
    if (kWrite) {
      *reinterpret_cast<uint4*>(&tile[tile_row][tile_col]) = packed;
      if (out != nullptr) *reinterpret_cast<uint4*>(out + r * cols + c) = packed;
    }
  }

  // Column phase: thread t writes rows [16·(t / kTile), +16) of tile column t % kTile, which
  // the row phase filled wherever the column and the rows are inside the tensor (cols and rows
  // are multiples of 16).
  if (kWrite && out_transposed != nullptr) {
    __syncthreads();
    const int column = threadIdx.x % kTile;
    const int first_row = (threadIdx.x / kTile) * kChunk;
    if (col0 + column < cols && row0 + first_row < rows) {
      uint4 packed;
      uint8_t* bytes = reinterpret_cast<uint8_t*>(&packed);
#pragma unroll
      for (int i = 0; i < kChunk; ++i) bytes[i] = tile[first_row + i][column];
      *reinterpret_cast<uint4*>(out_transposed + (col0 + column) * rows + row0 + first_row) =
          packed;
    }
  }

  BlockAmaxToGlobal(max_bits, amax);
}

__global__ void Fp8ScaleKernel(const float* amax, float fp8_max, float* scale,
                               float* scale_inverse) {
  const float a = amax[0];
  float s;
  if (!(a >= 0.0f) || isinf(a)) {
    s = __int_as_float(0x7fffffff);  // NaN: see Fp8ScaleFromAmax
  } else if (a == 0.0f) {
    s = 1.0f;
  } else {
    s = __fdiv_rn(fp8_max, a);
    if (isinf(s)) s = FLT_MAX;
  }
  scale[0] = s;
  scale_inverse[0] = __fdiv_rn(1.0f, s);
}

template <__nv_fp8_interpretation_t kKind>
void LaunchCast(const __nv_bfloat16* in, int64_t rows, int64_t cols, const float* scale,
                uint8_t* out, uint8_t* out_transposed, float* amax, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((cols + kTile - 1) / kTile),
                  static_cast<unsigned>((rows + kTile - 1) / kTile));
  if (out == nullptr && out_transposed == nullptr) {
    CastToFp8Kernel<kKind, false>
        <<<grid, kCastThreads, 0, stream>>>(in, rows, cols, scale, out, out_transposed, amax);
  } else {
    CastToFp8Kernel<kKind, true>
        <<<grid, kCastThreads, 0, stream>>>(in, rows, cols, scale, out, out_transposed, amax);
  }
}

}  // namespace

const char* Fp8FormatName(Fp8Format format) { return format == Fp8Format::kE4M3 ? "e4m3" : "e5m2"; }

absl::Status CastToFp8(const __nv_bfloat16* in, int64_t rows, int64_t cols, Fp8Format format,
                       const float* scale, uint8_t* out, uint8_t* out_transposed, float* amax,
                       cudaStream_t stream) {
  const bool writes = out != nullptr || out_transposed != nullptr;
  if (rows < 0 || cols < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("CastToFp8: negative shape [", rows, ", ", cols, "]"));
  }
  if (!writes && amax == nullptr) {
    return absl::InvalidArgumentError("CastToFp8: no output and no amax: nothing to do");
  }
  if (rows == 0 || cols == 0) return absl::OkStatus();
  if (in == nullptr || (writes && scale == nullptr)) {
    return absl::InvalidArgumentError("CastToFp8: null input or scale");
  }
  if (cols % kChunk != 0 || (out_transposed != nullptr && rows % kChunk != 0)) {
    return absl::InvalidArgumentError(absl::StrCat("CastToFp8: [", rows, ", ", cols, "] needs cols",
                                                   out_transposed != nullptr ? " and rows" : "",
                                                   " a multiple of ", kChunk,
                                                   " (16-byte stores of fp8 rows and columns)"));
  }
  if (!Aligned16(in) || !Aligned16(out) || !Aligned16(out_transposed)) {
    return absl::InvalidArgumentError("CastToFp8: input and outputs must be 16-byte aligned");
  }
  if ((rows + kTile - 1) / kTile > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("CastToFp8: ", rows, " rows exceed the grid (", int64_t{65535} * kTile, ")"));
  }
  if (format == Fp8Format::kE4M3) {
    LaunchCast<__NV_E4M3>(in, rows, cols, scale, out, out_transposed, amax, stream);
  } else {
    LaunchCast<__NV_E5M2>(in, rows, cols, scale, out, out_transposed, amax, stream);
  }
  CUDA_CHECK_LAUNCH("CastToFp8Kernel");
  return absl::OkStatus();
}

absl::Status Fp8ScaleFromAmax(const float* amax, Fp8Format format, float* scale,
                              float* scale_inverse, cudaStream_t stream) {
  if (amax == nullptr || scale == nullptr || scale_inverse == nullptr) {
    return absl::InvalidArgumentError("Fp8ScaleFromAmax: null pointer");
  }
  Fp8ScaleKernel<<<1, 1, 0, stream>>>(amax, Fp8Max(format), scale, scale_inverse);
  CUDA_CHECK_LAUNCH("Fp8ScaleKernel");
  return absl::OkStatus();
}

}  // namespace fsdpd::cuda
