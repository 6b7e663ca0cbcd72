// The FP8 products of a linear layer through cuBLASLt, on operands cast by CastToFp8
// (kernels/cuda/fp8.h). Matrices are row-major; every product is
//
//   out[rows, cols] = descale_left · descale_right · left[rows, depth] · right[cols, depth]ᵀ
//
// with both operands depth-contiguous: cuBLASLt's FP8 kernels on Hopper take only the "TN"
// layout (column-major A transposed, B not), which in row-major terms is exactly this. So
// forward reads x and W as they are, the input gradient reads dY and Wᵀ, and the weight
// gradient reads dYᵀ and Xᵀ; CastToFp8 writes those transposes in its one pass. The descales
// (1 / scale of each operand, from Fp8ScaleFromAmax) are device pointers, given to cuBLASLt as
// CUBLASLT_MATMUL_DESC_A/B_SCALE_POINTER: nothing is read back to the host.
//
// cuBLASLt's rules for FP8 (the cuBLAS documentation of cublasLtMatmul; cublasLt.h), checked
// here before cuBLASLt is asked so that a bad call gets a clear status:
//   - compute type CUBLAS_COMPUTE_32F, scale type fp32;
//   - e4m3 × e4m3, e4m3 × e5m2 and e5m2 × e4m3; e5m2 × e5m2 has no kernel;
//   - output bf16 (C bf16) or fp32 (C fp32), among the documented C/D pairs;
//   - 16-byte alignment of every pointer and of every leading dimension: depth a multiple of
//     16, and cols a multiple of 8 (bf16 out) or 4 (fp32 out).
// The accumulation is fp32 with the partial sums of the tensor cores promoted into it
// periodically; CUBLASLT_MATMUL_DESC_FAST_ACCUM skips the promotion (faster, less accurate), off
// by default (Fp8GemmConfig).
//
// Plans are cached per problem and their algorithm is chosen once by timing up to `candidates`
// heuristic results, as kernels/cuda/gemm.h does (that one-off search synchronises the
// stream). An Fp8Gemm is not thread-safe.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/cuda/fp8.h"

namespace fsdpd::cuda {

struct Fp8GemmConfig {
  int64_t workspace_bytes = int64_t{32} << 20;  // as GemmConfig
  int candidates = 8;
  int timing_repeats = 3;
  int sm_count_target = 0;  // as GemmConfig::sm_count_target
  // CUBLASLT_MATMUL_DESC_FAST_ACCUM for the forward product and for the two gradients.
  bool fast_accumulation_forward = false;
  bool fast_accumulation_gradients = false;
};

// One FP8 operand: row-major data of `format`, and the device float its values are multiplied
// by in the product (the inverse of the scale CastToFp8 used).
struct Fp8Operand {
  const uint8_t* data = nullptr;
  Fp8Format format = Fp8Format::kE4M3;
  const float* descale = nullptr;
};

class Fp8Gemm {
 public:
  // `workspace`: device memory of config.workspace_bytes, owned by the caller, kept alive as
  // long as the Fp8Gemm.
  static absl::StatusOr<std::unique_ptr<Fp8Gemm>> Create(void* workspace,
                                                         const Fp8GemmConfig& config);
  ~Fp8Gemm();
  Fp8Gemm(const Fp8Gemm&) = delete;
  Fp8Gemm& operator=(const Fp8Gemm&) = delete;

  // out[m, n] = x[m, k] · weight[n, k]ᵀ, bf16.
  absl::Status Forward(const Fp8Operand& x, const Fp8Operand& weight, int64_t m, int64_t n,
                       int64_t k, __nv_bfloat16* out, cudaStream_t stream);
  // dx[m, k] = dout[m, n] · weight[n, k], from weight_transposed[k, n]; bf16, overwritten.
  absl::Status InputGradient(const Fp8Operand& dout, const Fp8Operand& weight_transposed, int64_t m,
                             int64_t n, int64_t k, __nv_bfloat16* dx, cudaStream_t stream);
  // dweight[n, k] (+)= dout[m, n]ᵀ · x[m, k], from dout_transposed[n, m] and
  // x_transposed[k, m]; fp32, accumulated (beta 1) unless accumulate is false.
  absl::Status WeightGradient(const Fp8Operand& dout_transposed, const Fp8Operand& x_transposed,
                              int64_t m, int64_t n, int64_t k, float* dweight, cudaStream_t stream,
                              bool accumulate = true);

  // The product the three above are made of: out[rows, cols] (+)= left · rightᵀ, out bf16
  // (out_fp32 false) or fp32.
  absl::Status Matmul(const Fp8Operand& left, const Fp8Operand& right, int64_t rows, int64_t cols,
                      int64_t depth, void* out, bool out_fp32, bool accumulate,
                      bool fast_accumulation, cudaStream_t stream);

  int64_t cached_plans() const;

 private:
  struct State;
  explicit Fp8Gemm(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace fsdpd::cuda
