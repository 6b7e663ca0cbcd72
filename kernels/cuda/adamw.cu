#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/cuda_check.h"
#include "kernels/cuda/adamw.h"
#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/elementwise.h"
#include "kernels/split_master.h"

namespace fsdpd::cuda {
namespace {

constexpr int kThreads = 256;

struct AdamWScalars {
  float decay;
  float average_weight;
  float beta2;
  float square_weight;
  float step_size;
  float bias_correction2_sqrt;
  float eps;
};

// One element, as the CPU's AdamW writes it: the same fp32 operations in the same order, each
// rounded (no fused multiply-adds), so both engines agree to the bit.
__device__ __forceinline__ void AdamWElement(float& param, float g, float& exp_avg,
                                             float& exp_avg_sq, const AdamWScalars& s) {
  float p = __fmul_rn(param, s.decay);
  const float m = __fadd_rn(exp_avg, __fmul_rn(s.average_weight, __fsub_rn(g, exp_avg)));
  const float v =
      __fadd_rn(__fmul_rn(exp_avg_sq, s.beta2), __fmul_rn(__fmul_rn(s.square_weight, g), g));
  const float denominator = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), s.bias_correction2_sqrt), s.eps);
  p = __fsub_rn(p, __fdiv_rn(__fmul_rn(s.step_size, m), denominator));
  exp_avg = m;
  exp_avg_sq = v;
  param = p;
}

// Where the master lives, for the update alone (AdamWKernel, AdamWVectorKernel), one element or
// one vector of four at a time: plain fp32, or two 16-bit halves (kernels/split_master.h)
// joined on load and split on store. The update with the sum reads an fp32 master only.
struct PlainMaster {
  float* param;
  __device__ float Load(int64_t i) const { return param[i]; }
  __device__ void Store(int64_t i, float p) const { param[i] = p; }
  __device__ float4 LoadVector(int64_t i) const { return reinterpret_cast<float4*>(param)[i]; }
  __device__ void StoreVector(int64_t i, const float4& p) const {
    reinterpret_cast<float4*>(param)[i] = p;
  }
  PlainMaster Offset(int64_t elements) const { return {param + elements}; }
  bool VectorAligned() const { return Aligned16(param); }
};

struct SplitMaster {
  uint16_t* high;
  uint16_t* low;
  __device__ static float Join(uint16_t h, uint16_t l) { return __uint_as_float(JoinBits(h, l)); }
  __device__ float Load(int64_t i) const { return Join(high[i], low[i]); }
  __device__ void Store(int64_t i, float p) const {
    const SplitHalves halves = SplitBits(__float_as_uint(p));
    high[i] = halves.high;
    low[i] = halves.low;
  }
  __device__ float4 LoadVector(int64_t i) const {
    const ushort4 h = reinterpret_cast<const ushort4*>(high)[i];
    const ushort4 l = reinterpret_cast<const ushort4*>(low)[i];
    return make_float4(Join(h.x, l.x), Join(h.y, l.y), Join(h.z, l.z), Join(h.w, l.w));
  }
  __device__ void StoreVector(int64_t i, const float4& p) const {
    const SplitHalves x = SplitBits(__float_as_uint(p.x)), y = SplitBits(__float_as_uint(p.y));
    const SplitHalves z = SplitBits(__float_as_uint(p.z)), w = SplitBits(__float_as_uint(p.w));
    reinterpret_cast<ushort4*>(high)[i] = make_ushort4(x.high, y.high, z.high, w.high);
    reinterpret_cast<ushort4*>(low)[i] = make_ushort4(x.low, y.low, z.low, w.low);
  }
  SplitMaster Offset(int64_t elements) const { return {high + elements, low + elements}; }
  bool VectorAligned() const {
    return reinterpret_cast<uintptr_t>(high) % 8 == 0 && reinterpret_cast<uintptr_t>(low) % 8 == 0;
  }
};

template <class Master>
__global__ void AdamWKernel(Master master, const float* grad, float* exp_avg, float* exp_avg_sq,
                            int64_t count, AdamWScalars s) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    float p = master.Load(i);
    AdamWElement(p, grad[i], exp_avg[i], exp_avg_sq[i], s);
    master.Store(i, p);
  }
}

// AdamWElement on each lane of one vector of four.
__device__ __forceinline__ void AdamWVector(float4& p, const float4& g, float4& m, float4& v,
                                            const AdamWScalars& s) {
  AdamWElement(p.x, g.x, m.x, v.x, s);
  AdamWElement(p.y, g.y, m.y, v.y, s);
  AdamWElement(p.z, g.z, m.z, v.z, s);
  AdamWElement(p.w, g.w, m.w, v.w, s);
}

template <class Master>
__device__ __forceinline__ void AdamWVectorAt(const Master& master, const float4* __restrict__ grad,
                                              float4* __restrict__ exp_avg,
                                              float4* __restrict__ exp_avg_sq, int64_t i,
                                              const AdamWScalars& s) {
  float4 p = master.LoadVector(i);
  float4 m = exp_avg[i];
  float4 v = exp_avg_sq[i];
  AdamWVector(p, grad[i], m, v, s);
  master.StoreVector(i, p);
  exp_avg[i] = m;
  exp_avg_sq[i] = v;
}

// Four elements a thread through 16-byte accesses (28 bytes an element move either way; the
// wider accesses get closer to the memory's rate), one vector a thread in short blocks, or
// (kStrided: AdamWStepParams::grid_limit) a capped grid striding over the vectors.
template <class Master, bool kStrided>
__global__ void AdamWVectorKernel(Master master, const float4* __restrict__ grad,
                                  float4* __restrict__ exp_avg, float4* __restrict__ exp_avg_sq,
                                  int64_t vectors, AdamWScalars s) {
  int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if constexpr (!kStrided) {
    if (i < vectors) AdamWVectorAt(master, grad, exp_avg, exp_avg_sq, i, s);
  } else {
    for (; i < vectors; i += int64_t{gridDim.x} * blockDim.x) {
      AdamWVectorAt(master, grad, exp_avg, exp_avg_sq, i, s);
    }
  }
}

// AdamWVectorKernel's update in the block order of the fp32 sums of squares (device_common.cuh),
// summing the gradient's squares on the way: one read of the gradient for both the update and
// the norm. Each thread loads its kSquareSumVectorsPerThread vectors before it updates any, so
// that all of its loads are in flight at once.
__device__ __forceinline__ void AdamWSquareSumSlice(
    float4* __restrict__ param, const float4* __restrict__ grad, float4* __restrict__ exp_avg,
    float4* __restrict__ exp_avg_sq, int64_t vectors, const AdamWScalars& s, int64_t block,
    float* __restrict__ partials, float* scratch) {
  constexpr int kVectors = kSquareSumVectorsPerThread;
  const int64_t first = block * kSquareSumVectorsPerBlock + threadIdx.x;
  float4 p[kVectors], g[kVectors], m[kVectors], v[kVectors];
#pragma unroll
  for (int k = 0; k < kVectors; ++k) {
    const int64_t i = first + int64_t{k} * kSquareSumThreads;
    if (i < vectors) {
      p[k] = param[i];
      g[k] = grad[i];
      m[k] = exp_avg[i];
      v[k] = exp_avg_sq[i];
    }
  }
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < kVectors; ++k) {
    const int64_t i = first + int64_t{k} * kSquareSumThreads;
    if (i < vectors) {
      sum = AddSquares(g[k], sum);
      AdamWVector(p[k], g[k], m[k], v[k], s);
      param[i] = p[k];
      exp_avg[i] = m[k];
      exp_avg_sq[i] = v[k];
    }
  }
  sum = BlockSum(sum, scratch);
  if (threadIdx.x == 0) partials[block] = sum;
}

// A block per slice of the sum's order, or (kStrided) a capped grid whose blocks take every
// gridDim-th slice.
template <bool kStrided>
__global__ void AdamWSquareSumKernel(float4* __restrict__ param, const float4* __restrict__ grad,
                                     float4* __restrict__ exp_avg, float4* __restrict__ exp_avg_sq,
                                     int64_t vectors, AdamWScalars s, int64_t blocks,
                                     float* __restrict__ partials) {
  __shared__ float scratch[32];
  if constexpr (!kStrided) {
    AdamWSquareSumSlice(param, grad, exp_avg, exp_avg_sq, vectors, s, blockIdx.x, partials,
                        scratch);
  } else {
    for (int64_t block = blockIdx.x; block < blocks; block += gridDim.x) {
      AdamWSquareSumSlice(param, grad, exp_avg, exp_avg_sq, vectors, s, block, partials, scratch);
      __syncthreads();  // scratch is reused by the next slice
    }
  }
}

AdamWScalars ScalarsFor(const AdamWStepParams& params) {
  const double step = static_cast<double>(params.step);
  const double bias_correction1 = 1.0 - std::pow(params.beta1, step);
  const double bias_correction2 = 1.0 - std::pow(params.beta2, step);
  AdamWScalars scalars;
  scalars.decay = static_cast<float>(1.0 - params.lr * params.weight_decay);
  scalars.average_weight = static_cast<float>(1.0 - params.beta1);
  scalars.beta2 = static_cast<float>(params.beta2);
  scalars.square_weight = static_cast<float>(1.0 - params.beta2);
  scalars.step_size = static_cast<float>(params.lr / bias_correction1);
  scalars.bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  scalars.eps = static_cast<float>(params.eps);
  return scalars;
}

absl::Status CheckGridLimit(const AdamWStepParams& params) {
  if (params.grid_limit >= 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("AdamW: negative grid limit ", params.grid_limit));
}

// Short blocks (one vector or element a thread): on the comm stream (the optimizer in backward
// there), a capped grid of long-running blocks would hold every SM from the compute stream's
// GEMMs. A grid_limit below the SM count caps the grid on purpose: those few SMs stay the
// optimizer's and the GEMMs keep the rest.
template <class Master>
absl::Status LaunchAdamW(Master master, const float* grad, float* exp_avg, float* exp_avg_sq,
                         int64_t count, const AdamWStepParams& params, cudaStream_t stream) {
  if (count < 0) return absl::InvalidArgumentError(absl::StrCat("AdamW: negative count ", count));
  FSDPD_RETURN_IF_ERROR(CheckGridLimit(params));
  if (count == 0) return absl::OkStatus();
  const AdamWScalars scalars = ScalarsFor(params);
  const int64_t max_blocks = params.grid_limit > 0 ? params.grid_limit : kMaxGridX;
  int64_t done = 0;
  const int64_t vectors = count / 4;
  if (vectors > 0 && master.VectorAligned() && Aligned16(grad) && Aligned16(exp_avg) &&
      Aligned16(exp_avg_sq)) {
    const unsigned blocks = GridFor(vectors, kThreads, max_blocks);
    const auto* grad4 = reinterpret_cast<const float4*>(grad);
    auto* exp_avg4 = reinterpret_cast<float4*>(exp_avg);
    auto* exp_avg_sq4 = reinterpret_cast<float4*>(exp_avg_sq);
    if (int64_t{blocks} * kThreads < vectors) {
      AdamWVectorKernel<Master, true>
          <<<blocks, kThreads, 0, stream>>>(master, grad4, exp_avg4, exp_avg_sq4, vectors, scalars);
    } else {
      AdamWVectorKernel<Master, false>
          <<<blocks, kThreads, 0, stream>>>(master, grad4, exp_avg4, exp_avg_sq4, vectors, scalars);
    }
    CUDA_CHECK_LAUNCH("AdamWVectorKernel");
    done = vectors * 4;
  }
  if (done == count) return absl::OkStatus();
  AdamWKernel<<<GridFor(count - done, kThreads, max_blocks), kThreads, 0, stream>>>(
      master.Offset(done), grad + done, exp_avg + done, exp_avg_sq + done, count - done, scalars);
  CUDA_CHECK_LAUNCH("AdamWKernel");
  return absl::OkStatus();
}

}  // namespace

absl::Status AdamWStep(float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
                       int64_t count, const AdamWStepParams& params, cudaStream_t stream) {
  return LaunchAdamW(PlainMaster{param}, grad, exp_avg, exp_avg_sq, count, params, stream);
}

absl::Status AdamWStepWithSquareSum(float* param, const float* grad, float* exp_avg,
                                    float* exp_avg_sq, int64_t count, const AdamWStepParams& params,
                                    float* partials, float* square_sum, cudaStream_t stream) {
  FSDPD_RETURN_IF_ERROR(CheckGridLimit(params));
  if (count < 4 || !Aligned16(param) || !Aligned16(grad) || !Aligned16(exp_avg) ||
      !Aligned16(exp_avg_sq)) {
    // Two passes; SumOfSquaresFloat takes the same order either way.
    FSDPD_RETURN_IF_ERROR(
        SumOfSquaresFloat(grad, count, partials, square_sum, stream, params.grid_limit));
    return AdamWStep(param, grad, exp_avg, exp_avg_sq, count, params, stream);
  }
  const AdamWScalars scalars = ScalarsFor(params);
  const int64_t vectors = count / 4;
  const int64_t blocks = SquareSumBlocks(vectors);
  auto* param4 = reinterpret_cast<float4*>(param);
  const auto* grad4 = reinterpret_cast<const float4*>(grad);
  auto* exp_avg4 = reinterpret_cast<float4*>(exp_avg);
  auto* exp_avg_sq4 = reinterpret_cast<float4*>(exp_avg_sq);
  if (params.grid_limit > 0 && params.grid_limit < blocks) {
    AdamWSquareSumKernel<true>
        <<<static_cast<unsigned>(params.grid_limit), kSquareSumThreads, 0, stream>>>(
            param4, grad4, exp_avg4, exp_avg_sq4, vectors, scalars, blocks, partials);
  } else {
    AdamWSquareSumKernel<false><<<static_cast<unsigned>(blocks), kSquareSumThreads, 0, stream>>>(
        param4, grad4, exp_avg4, exp_avg_sq4, vectors, scalars, blocks, partials);
  }
  CUDA_CHECK_LAUNCH("AdamWSquareSumKernel");
  const int64_t done = vectors * 4;
  if (done < count) {
    AdamWKernel<<<1, kThreads, 0, stream>>>(PlainMaster{param + done}, grad + done, exp_avg + done,
                                            exp_avg_sq + done, count - done, scalars);
    CUDA_CHECK_LAUNCH("AdamWKernel");
  }
  return FinishSquareSum(partials, blocks, grad + done, count - done, square_sum, stream);
}

absl::Status AdamWStepSplit(uint16_t* high, uint16_t* low, const float* grad, float* exp_avg,
                            float* exp_avg_sq, int64_t count, const AdamWStepParams& params,
                            float* partials, float* square_sum, cudaStream_t stream) {
  // With the sum: two passes. The fused kernel's order (four vectors a thread, all loaded
  // before any update) ran the split master at 3.2 TB/s on the H200 against 4.2 for this
  // update alone, more than the second read of the gradient costs (bench/RESULTS.md).
  FSDPD_RETURN_IF_ERROR(CheckGridLimit(params));
  if (square_sum != nullptr) {
    FSDPD_RETURN_IF_ERROR(
        SumOfSquaresFloat(grad, count, partials, square_sum, stream, params.grid_limit));
  }
  return LaunchAdamW(SplitMaster{high, low}, grad, exp_avg, exp_avg_sq, count, params, stream);
}

}  // namespace fsdpd::cuda
