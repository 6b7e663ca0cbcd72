// Every cuBLASLt call of the project. Matrices are row-major, as the model sees them; inputs are
// bf16 and products accumulate in fp32 (CUBLAS_COMPUTE_32F). Forward fuses the bias with the
// BIAS epilogue and the weight-gradient product fuses the bias gradient with BGRADB, falling
// back to a separate kernel where cuBLASLt offers no algorithm for the fused form (or the bias
// is not 16-byte aligned).
//
// Plans (matmul descriptor, layouts and the chosen algorithm) are cached per problem: shape,
// transposes, output type, epilogue, whether it accumulates, and operand alignments. The
// algorithm is chosen once per plan by timing up to `candidates` heuristic results on the
// caller's stream (this one-off search synchronises the stream). A Gemm is not thread-safe.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"

namespace fsdpd::cuda {

struct GemmConfig {
  // Hopper kernels want a large workspace; 32 MiB lets cuBLASLt pick its fastest split-K forms.
  int64_t workspace_bytes = int64_t{32} << 20;
  int candidates = 8;      // heuristic results timed per new plan
  int timing_repeats = 3;  // timed runs of each candidate, after one warm-up
  // CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET: the SMs cuBLASLt plans the products for, where
  // another stream's kernels keep the rest (CudaBackendConfig::optimizer_sms); 0: all of them.
  int sm_count_target = 0;
};

class Gemm {
 public:
  // `workspace` is device memory of config.workspace_bytes, owned by the caller and kept alive
  // as long as the Gemm.
  static absl::StatusOr<std::unique_ptr<Gemm>> Create(void* workspace, const GemmConfig& config);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // out[m, n] = x[m, k] · weight[n, k]ᵀ (+ bias[n] when bias != nullptr), out bf16.
  absl::Status LinearForward(const __nv_bfloat16* x, const __nv_bfloat16* weight,
                             const __nv_bfloat16* bias, int64_t m, int64_t n, int64_t k,
                             __nv_bfloat16* out, cudaStream_t stream);
  // dx[m, k] = dout[m, n] · weight[n, k], overwritten, bf16.
  absl::Status LinearInputGradient(const __nv_bfloat16* dout, const __nv_bfloat16* weight,
                                   int64_t m, int64_t n, int64_t k, __nv_bfloat16* dx,
                                   cudaStream_t stream);
  // dweight[n, k] (fp32) += dout[m, n]ᵀ · x[m, k]; dbias[n] (fp32) += Σ_rows dout when
  // dbias != nullptr. With accumulate false both are overwritten instead (beta 0, and the
  // bias-gradient epilogue writes dbias itself).
  absl::Status LinearWeightGradient(const __nv_bfloat16* dout, const __nv_bfloat16* x, int64_t m,
                                    int64_t n, int64_t k, float* dweight, float* dbias,
                                    cudaStream_t stream, bool accumulate = true);

  // How many plans are cached, and how many of those fell back to a separate epilogue kernel.
  int64_t cached_plans() const;
  int64_t unfused_plans() const;

 private:
  struct State;
  explicit Gemm(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

// The bias epilogue's own kernel, for products without it (the fallback above, the FP8 products
// of kernels/cuda/fp8_linear.h): out[r, c] += bias[c], rounded once to bf16. The bias
// gradient's is kernels/cuda/column_sum.h.
absl::Status AddBiasBf16(__nv_bfloat16* out, const __nv_bfloat16* bias, int64_t rows,
                         int64_t columns, cudaStream_t stream);

}  // namespace fsdpd::cuda
