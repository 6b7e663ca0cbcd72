#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/cuda_check.h"
#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/silu_math.cuh"
#include "kernels/cuda/swiglu.h"

namespace fsdpd::cuda {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kThreads = 256;
constexpr int64_t kMaxGridY = 65535;

// The vector kernels take eight columns of one row a thread (16-byte accesses; ffn a multiple of
// 8, every pointer 16-byte aligned): blockIdx.x · blockDim.x + threadIdx.x is the vector within
// the row's half, rows stride by gridDim.y. No division, and one pass over each tensor: the
// kernels are bandwidth-bound.
__global__ void SwigluForwardVectorKernel(const Bf16x8* gate_up, int64_t rows, int64_t vectors,
                                          Bf16x8* out) {
  const int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (c >= vectors) return;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const Bf16x8 gate = gate_up[r * 2 * vectors + c];
    const Bf16x8 up = gate_up[r * 2 * vectors + vectors + c];
    Bf16x8 result;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 g = __bfloat1622float2(gate.pairs[k]);
      const float2 u = __bfloat1622float2(up.pairs[k]);
      result.pairs[k] = __floats2bfloat162_rn(Silu(g.x) * u.x, Silu(g.y) * u.y);
    }
    out[r * vectors + c] = result;
  }
}

// kWithForward: also out = silu(gate)·up with SwigluForwardVectorKernel's bits. dgate_up may be
// gate_up: this thread alone reads and then writes its two vectors.
template <bool kWithForward>
__global__ void SwigluBackwardVectorKernel(const Bf16x8* dout, const Bf16x8* gate_up, int64_t rows,
                                           int64_t vectors, Bf16x8* dgate_up, Bf16x8* out) {
  const int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (c >= vectors) return;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const int64_t gate_at = r * 2 * vectors + c;
    const Bf16x8 gate = gate_up[gate_at];
    const Bf16x8 up = gate_up[gate_at + vectors];
    const Bf16x8 gradient = dout[r * vectors + c];
    Bf16x8 dgate, dup, forward;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 g = __bfloat1622float2(gate.pairs[k]);
      const float2 u = __bfloat1622float2(up.pairs[k]);
      const float2 d = __bfloat1622float2(gradient.pairs[k]);
      const float silu_x = Silu(g.x);
      const float silu_y = Silu(g.y);
      dgate.pairs[k] =
          __floats2bfloat162_rn(SiluGradient(d.x * u.x, g.x), SiluGradient(d.y * u.y, g.y));
      dup.pairs[k] = __floats2bfloat162_rn(d.x * silu_x, d.y * silu_y);
      if (kWithForward) forward.pairs[k] = __floats2bfloat162_rn(silu_x * u.x, silu_y * u.y);
    }
    dgate_up[gate_at] = dgate;
    dgate_up[gate_at + vectors] = dup;
    if (kWithForward) out[r * vectors + c] = forward;
  }
}

// One element a thread, for widths or pointers the vector kernels cannot take; the same maths.
__global__ void SwigluForwardKernel(const bf16* gate_up, int64_t rows, int64_t ffn, bf16* out) {
  const int64_t count = rows * ffn;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / ffn;
    const int64_t at = i + r * ffn;  // r · 2·ffn + (i − r·ffn)
    const float g = __bfloat162float(gate_up[at]);
    const float u = __bfloat162float(gate_up[at + ffn]);
    out[i] = __float2bfloat16_rn(Silu(g) * u);
  }
}

__global__ void SwigluBackwardKernel(const bf16* dout, const bf16* gate_up, int64_t rows,
                                     int64_t ffn, bf16* dgate_up, bf16* out) {
  const int64_t count = rows * ffn;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / ffn;
    const int64_t at = i + r * ffn;
    const float g = __bfloat162float(gate_up[at]);
    const float u = __bfloat162float(gate_up[at + ffn]);
    const float d = __bfloat162float(dout[i]);
    const float silu = Silu(g);
    dgate_up[at] = __float2bfloat16_rn(SiluGradient(d * u, g));
    dgate_up[at + ffn] = __float2bfloat16_rn(d * silu);
    if (out != nullptr) out[i] = __float2bfloat16_rn(silu * u);
  }
}

// The vector kernels' launch: threads over the row's vectors (a warp at least), rows over y.
struct VectorLaunch {
  dim3 grid;
  int threads;
};
VectorLaunch VectorLaunchFor(int64_t rows, int64_t vectors) {
  const int threads = static_cast<int>(std::min<int64_t>(kThreads, (vectors + 31) / 32 * 32));
  return {dim3(static_cast<unsigned>((vectors + threads - 1) / threads),
               static_cast<unsigned>(std::min(rows, kMaxGridY))),
          threads};
}

absl::Status CheckShape(const char* op, int64_t rows, int64_t ffn) {
  if (rows < 0 || ffn < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": negative shape, rows ", rows, ", ffn ", ffn));
  }
  // The vector kernels put a row's vectors on grid x.
  if ((ffn / 8 + kThreads - 1) / kThreads > kMaxGridX) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ffn ", ffn, " too wide"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status SwigluForward(const bf16* gate_up, int64_t rows, int64_t ffn, bf16* out,
                           cudaStream_t stream) {
  FSDPD_RETURN_IF_ERROR(CheckShape("SwigluForward", rows, ffn));
  if (rows == 0 || ffn == 0) return absl::OkStatus();
  if (gate_up == nullptr || out == nullptr) {
    return absl::InvalidArgumentError("SwigluForward: null pointer");
  }
  if (ffn % 8 == 0 && Aligned16(gate_up) && Aligned16(out)) {
    const VectorLaunch launch = VectorLaunchFor(rows, ffn / 8);
    SwigluForwardVectorKernel<<<launch.grid, launch.threads, 0, stream>>>(
        reinterpret_cast<const Bf16x8*>(gate_up), rows, ffn / 8, reinterpret_cast<Bf16x8*>(out));
    CUDA_CHECK_LAUNCH("SwigluForwardVectorKernel");
    return absl::OkStatus();
  }
  SwigluForwardKernel<<<GridFor(rows * ffn, kThreads), kThreads, 0, stream>>>(gate_up, rows, ffn,
                                                                              out);
  CUDA_CHECK_LAUNCH("SwigluForwardKernel");
  return absl::OkStatus();
}

absl::Status SwigluBackward(const bf16* dout, const bf16* gate_up, int64_t rows, int64_t ffn,
                            bf16* dgate_up, bf16* out, cudaStream_t stream) {
  FSDPD_RETURN_IF_ERROR(CheckShape("SwigluBackward", rows, ffn));
  if (rows == 0 || ffn == 0) return absl::OkStatus();
  if (dout == nullptr || gate_up == nullptr || dgate_up == nullptr) {
    return absl::InvalidArgumentError("SwigluBackward: null pointer");
  }
  if (ffn % 8 == 0 && Aligned16(dout) && Aligned16(gate_up) && Aligned16(dgate_up) &&
      (out == nullptr || Aligned16(out))) {
    const VectorLaunch launch = VectorLaunchFor(rows, ffn / 8);
    const auto* dout8 = reinterpret_cast<const Bf16x8*>(dout);
    const auto* gate_up8 = reinterpret_cast<const Bf16x8*>(gate_up);
    auto* dgate_up8 = reinterpret_cast<Bf16x8*>(dgate_up);
    if (out != nullptr) {
      SwigluBackwardVectorKernel<true><<<launch.grid, launch.threads, 0, stream>>>(
          dout8, gate_up8, rows, ffn / 8, dgate_up8, reinterpret_cast<Bf16x8*>(out));
    } else {
      SwigluBackwardVectorKernel<false><<<launch.grid, launch.threads, 0, stream>>>(
          dout8, gate_up8, rows, ffn / 8, dgate_up8, nullptr);
    }
    CUDA_CHECK_LAUNCH("SwigluBackwardVectorKernel");
    return absl::OkStatus();
  }
  SwigluBackwardKernel<<<GridFor(rows * ffn, kThreads), kThreads, 0, stream>>>(dout, gate_up, rows,
                                                                               ffn, dgate_up, out);
  CUDA_CHECK_LAUNCH("SwigluBackwardKernel");
  return absl::OkStatus();
}

}  // namespace fsdpd::cuda
