#include <cublasLt.h>

#include <algorithm>
#include <map>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/cuda_check.h"
#include "kernels/cuda/column_sum.h"
#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/gemm.h"
#include "spdlog/spdlog.h"

namespace fsdpd::cuda {
namespace {

constexpr int kThreads = 256;

// One column-major cuBLASLt problem: D[m, n] = op(A)[m, k] · op(B)[k, n] (+ beta · D).
struct Problem {
  cublasOperation_t trans_a = CUBLAS_OP_N;
  cublasOperation_t trans_b = CUBLAS_OP_N;
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldd = 0;
  cudaDataType_t d_type = CUDA_R_16BF;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  bool accumulate = false;
  int align_a = 16, align_b = 16, align_d = 16;

  auto Tie() const {
    return std::make_tuple(static_cast<int>(trans_a), static_cast<int>(trans_b), m, n, k, lda, ldb,
                           ldd, static_cast<int>(d_type), static_cast<int>(epilogue), accumulate,
                           align_a, align_b, align_d);
  }
  bool operator<(const Problem& other) const { return Tie() < other.Tie(); }
};

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool available = false;  // false: cuBLASLt offered no algorithm for this problem
  float best_ms = 0.0f;
};

// The largest power of two (up to 16) dividing the address.
int AlignmentOf(const void* pointer) {
  const auto address = reinterpret_cast<uintptr_t>(pointer);
  int alignment = 16;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

int64_t ElementSize(cudaDataType_t type) { return type == CUDA_R_32F ? 4 : 2; }

__global__ void AddBiasKernel(__nv_bfloat16* out, const __nv_bfloat16* bias, int64_t rows,
                              int64_t columns) {
  const int64_t count = rows * columns;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = __float2bfloat16_rn(__bfloat162float(out[i]) + __bfloat162float(bias[i % columns]));
  }
}

}  // namespace

struct Gemm::State {
  GemmConfig config;
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  std::map<Problem, Plan> plans;
  // BGRADB's output before it is added to dbias; without BGRADB, ColumnSumBf16's partials.
  float* bias_gradient = nullptr;
  int64_t bias_gradient_floats = 0;

  ~State() {
    for (auto& [problem, plan] : plans) {
      if (plan.a != nullptr) cublasLtMatrixLayoutDestroy(plan.a);
      if (plan.b != nullptr) cublasLtMatrixLayoutDestroy(plan.b);
      if (plan.d != nullptr) cublasLtMatrixLayoutDestroy(plan.d);
      if (plan.desc != nullptr) cublasLtMatmulDescDestroy(plan.desc);
    }
    if (bias_gradient != nullptr) cudaFree(bias_gradient);
    if (handle != nullptr) cublasLtDestroy(handle);
  }

  absl::StatusOr<Plan*> GetPlan(const Problem& problem, const void* a, const void* b, void* d,
                                cudaStream_t stream);
  absl::Status BuildPlan(const Problem& problem, Plan* plan);
  absl::Status ChooseAlgorithm(const Problem& problem, const void* a, const void* b, Plan* plan,
                               cudaStream_t stream);
  absl::Status Run(const Problem& problem, Plan& plan, const void* a, const void* b, void* d,
                   const void* bias, cudaStream_t stream);
  absl::Status EnsureBiasGradient(int64_t floats);
};

absl::Status Gemm::State::BuildPlan(const Problem& p, Plan* plan) {
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &p.trans_a,
                                              sizeof(p.trans_a)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &p.trans_b,
                                              sizeof(p.trans_b)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                              &p.epilogue, sizeof(p.epilogue)));
  if (config.sm_count_target > 0) {
    const int32_t sms = config.sm_count_target;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET,
                                                &sms, sizeof(sms)));
  }
  const bool a_transposed = p.trans_a != CUBLAS_OP_N;
  const bool b_transposed = p.trans_b != CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->a, CUDA_R_16BF, a_transposed ? p.k : p.m,
                                          a_transposed ? p.m : p.k, p.lda));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->b, CUDA_R_16BF, b_transposed ? p.n : p.k,
                                          b_transposed ? p.k : p.n, p.ldb));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->d, p.d_type, p.m, p.n, p.ldd));
  return absl::OkStatus();
}

absl::Status Gemm::State::ChooseAlgorithm(const Problem& p, const void* a, const void* b,
                                          Plan* plan, cudaStream_t stream) {
  cublasLtMatmulPreference_t preference = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  const uint64_t workspace_bytes = static_cast<uint64_t>(config.workspace_bytes);
  const uint32_t align_a = p.align_a, align_b = p.align_b, align_d = p.align_d;
  cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                       &workspace_bytes, sizeof(workspace_bytes));
  cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                       &align_a, sizeof(align_a));
  cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                       &align_b, sizeof(align_b));
  cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                       &align_d, sizeof(align_d));
  cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                       &align_d, sizeof(align_d));
  std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<size_t>(config.candidates));
  int returned = 0;
  const cublasStatus_t heuristic =
      cublasLtMatmulAlgoGetHeuristic(handle, plan->desc, plan->a, plan->b, plan->d, plan->d,
                                     preference, config.candidates, results.data(), &returned);
  cublasLtMatmulPreferenceDestroy(preference);
  if (heuristic != CUBLAS_STATUS_SUCCESS || returned == 0) {
    plan->available = false;
    return absl::OkStatus();
  }
  plan->available = true;
  plan->algo = results[0].algo;
  if (returned == 1) return absl::OkStatus();

  // Time the candidates into scratch outputs, so that accumulating products leave the real
  // output untouched. Without room for the scratch, the heuristic's first choice stands.
  void* scratch_d = nullptr;
  void* scratch_bias = nullptr;
  const bool bias_gradient = p.epilogue == CUBLASLT_EPILOGUE_BGRADB;
  const bool bias = p.epilogue == CUBLASLT_EPILOGUE_BIAS;
  if (cudaMalloc(&scratch_d, static_cast<size_t>(p.ldd * p.n * ElementSize(p.d_type))) !=
          cudaSuccess ||
      ((bias || bias_gradient) &&
       cudaMalloc(&scratch_bias, static_cast<size_t>(std::max(p.m, p.n) * 4)) != cudaSuccess)) {
    cudaGetLastError();
    if (scratch_d != nullptr) cudaFree(scratch_d);
    spdlog::warn("gemm: no memory to time algorithms for m={} n={} k={}; using the first", p.m, p.n,
                 p.k);
    return absl::OkStatus();
  }
  if (scratch_bias != nullptr) {
    CUDA_CHECK(
        cudaMemsetAsync(scratch_bias, 0, static_cast<size_t>(std::max(p.m, p.n) * 4), stream));
  }
  cudaEvent_t start = nullptr, stop = nullptr;
  absl::Status status = absl::OkStatus();
  float best = -1.0f;
  if (cudaEventCreate(&start) != cudaSuccess || cudaEventCreate(&stop) != cudaSuccess) {
    status.Update(absl::InternalError("gemm: cannot create timing events"));
  }
  const float alpha = 1.0f;
  const float beta = p.accumulate ? 1.0f : 0.0f;
  if ((bias || bias_gradient) && status.ok()) {
    cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &scratch_bias,
                                   sizeof(scratch_bias));
  }
  for (int i = 0; i < returned && status.ok(); ++i) {
    auto launch = [&]() {
      return cublasLtMatmul(handle, plan->desc, &alpha, a, plan->a, b, plan->b, &beta, scratch_d,
                            plan->d, scratch_d, plan->d, &results[i].algo, workspace,
                            static_cast<size_t>(config.workspace_bytes), stream);
    };
    if (launch() != CUBLAS_STATUS_SUCCESS) continue;  // a candidate may still refuse to run
    cudaEventRecord(start, stream);
    bool ran = true;
    for (int r = 0; r < config.timing_repeats && ran; ++r) {
      ran = launch() == CUBLAS_STATUS_SUCCESS;
    }
    cudaEventRecord(stop, stream);
    if (cudaEventSynchronize(stop) != cudaSuccess) {
      status.Update(absl::InternalError(absl::StrCat(
          "gemm: timing candidate ", i, " failed: ", cudaGetErrorString(cudaGetLastError()))));
      break;
    }
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, start, stop);
    if (ran && (best < 0.0f || ms < best)) {
      best = ms;
      plan->algo = results[i].algo;
    }
  }
  if (start != nullptr) cudaEventDestroy(start);
  if (stop != nullptr) cudaEventDestroy(stop);
  cudaStreamSynchronize(stream);
  cudaFree(scratch_d);
  if (scratch_bias != nullptr) cudaFree(scratch_bias);
  plan->best_ms = best / static_cast<float>(std::max(config.timing_repeats, 1));
  spdlog::debug("gemm: m={} n={} k={} epilogue={} chose among {} candidates: {:.3f} ms", p.m, p.n,
                p.k, static_cast<int>(p.epilogue), returned, plan->best_ms);
  return status;
}

absl::StatusOr<Plan*> Gemm::State::GetPlan(const Problem& problem, const void* a, const void* b,
                                           void* d, cudaStream_t stream) {
  auto found = plans.find(problem);
  if (found != plans.end()) return &found->second;
  Plan plan;
  absl::Status status = BuildPlan(problem, &plan);
  if (status.ok()) status.Update(ChooseAlgorithm(problem, a, b, &plan, stream));
  Plan& stored = plans.emplace(problem, plan).first->second;  // destroyed with the state
  if (!status.ok()) return status;
  return &stored;
}

absl::Status Gemm::State::Run(const Problem& p, Plan& plan, const void* a, const void* b, void* d,
                              const void* bias, cudaStream_t stream) {
  if (bias != nullptr) {
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                sizeof(bias)));
  }
  const float alpha = 1.0f;
  const float beta = p.accumulate ? 1.0f : 0.0f;
  CUBLAS_CHECK(cublasLtMatmul(handle, plan.desc, &alpha, a, plan.a, b, plan.b, &beta, d, plan.d, d,
                              plan.d, &plan.algo, workspace,
                              static_cast<size_t>(config.workspace_bytes), stream));
  return absl::OkStatus();
}

absl::Status Gemm::State::EnsureBiasGradient(int64_t floats) {
  if (floats <= bias_gradient_floats) return absl::OkStatus();
  if (bias_gradient != nullptr) {
    CUDA_CHECK(cudaFree(bias_gradient));  // synchronises: the old buffer may be in use
    bias_gradient = nullptr;
    bias_gradient_floats = 0;
  }
  CUDA_CHECK(cudaMalloc(&bias_gradient, static_cast<size_t>(floats) * 4));
  bias_gradient_floats = floats;
  return absl::OkStatus();
}

Gemm::Gemm(std::unique_ptr<State> state) : state_(std::move(state)) {}
Gemm::~Gemm() = default;

absl::StatusOr<std::unique_ptr<Gemm>> Gemm::Create(void* workspace, const GemmConfig& config) {
  if (workspace == nullptr || config.workspace_bytes <= 0) {
    return absl::InvalidArgumentError("Gemm::Create: a device workspace is required");
  }
  if (config.sm_count_target < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Gemm::Create: negative sm_count_target ", config.sm_count_target));
  }
  if (config.candidates < 1 || config.timing_repeats < 1) {
    return absl::InvalidArgumentError(absl::StrCat("Gemm::Create: candidates (", config.candidates,
                                                   ") and timing_repeats (", config.timing_repeats,
                                                   ") must be >= 1"));
  }
  auto state = std::make_unique<State>();
  state->config = config;
  state->workspace = workspace;
  CUBLAS_CHECK(cublasLtCreate(&state->handle));
  return std::unique_ptr<Gemm>(new Gemm(std::move(state)));
}

namespace {

absl::Status CheckSizes(const char* op, int64_t m, int64_t n, int64_t k,
                        std::initializer_list<const void*> pointers) {
  if (m < 0 || n <= 0 || k <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": sizes must be positive, got m=", m, " n=", n, " k=", k));
  }
  for (const void* pointer : pointers) {
    if (pointer == nullptr && m > 0) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": null matrix pointer"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Gemm::LinearForward(const __nv_bfloat16* x, const __nv_bfloat16* weight,
                                 const __nv_bfloat16* bias, int64_t m, int64_t n, int64_t k,
                                 __nv_bfloat16* out, cudaStream_t stream) {
  FSDPD_RETURN_IF_ERROR(CheckSizes("Gemm::LinearForward", m, n, k, {x, weight, out}));
  if (m == 0) return absl::OkStatus();
  // Column-major: outᵀ[n, m] = weight[n, k] (stored k × n, transposed) · xᵀ[k, m].
  Problem p;
  p.trans_a = CUBLAS_OP_T;
  p.trans_b = CUBLAS_OP_N;
  p.m = n, p.n = m, p.k = k;
  p.lda = k, p.ldb = k, p.ldd = n;
  p.d_type = CUDA_R_16BF;
  p.align_a = AlignmentOf(weight), p.align_b = AlignmentOf(x), p.align_d = AlignmentOf(out);
  const bool fuse_bias = bias != nullptr && AlignmentOf(bias) >= 16;
  if (fuse_bias) {
    p.epilogue = CUBLASLT_EPILOGUE_BIAS;
    absl::StatusOr<Plan*> plan = state_->GetPlan(p, weight, x, out, stream);
    if (!plan.ok()) return plan.status();
    if ((*plan)->available) return state_->Run(p, **plan, weight, x, out, bias, stream);
  }
  p.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  absl::StatusOr<Plan*> plan = state_->GetPlan(p, weight, x, out, stream);
  if (!plan.ok()) return plan.status();
  if (!(*plan)->available) {
    return absl::UnimplementedError(absl::StrCat(
        "Gemm::LinearForward: cuBLASLt has no algorithm for m=", m, " n=", n, " k=", k));
  }
  FSDPD_RETURN_IF_ERROR(state_->Run(p, **plan, weight, x, out, nullptr, stream));
  if (bias == nullptr) return absl::OkStatus();
  return AddBiasBf16(out, bias, m, n, stream);
}

absl::Status Gemm::LinearInputGradient(const __nv_bfloat16* dout, const __nv_bfloat16* weight,
                                       int64_t m, int64_t n, int64_t k, __nv_bfloat16* dx,
                                       cudaStream_t stream) {
  FSDPD_RETURN_IF_ERROR(CheckSizes("Gemm::LinearInputGradient", m, n, k, {dout, weight, dx}));
  if (m == 0) return absl::OkStatus();
  // Column-major: dxᵀ[k, m] = weightᵀ (stored k × n) · doutᵀ[n, m].
  Problem p;
  p.trans_a = CUBLAS_OP_N;
  p.trans_b = CUBLAS_OP_N;
  p.m = k, p.n = m, p.k = n;
  p.lda = k, p.ldb = n, p.ldd = k;
  p.d_type = CUDA_R_16BF;
  p.align_a = AlignmentOf(weight), p.align_b = AlignmentOf(dout), p.align_d = AlignmentOf(dx);
  absl::StatusOr<Plan*> plan = state_->GetPlan(p, weight, dout, dx, stream);
  if (!plan.ok()) return plan.status();
  if (!(*plan)->available) {
    return absl::UnimplementedError(absl::StrCat(
        "Gemm::LinearInputGradient: cuBLASLt has no algorithm for m=", m, " n=", n, " k=", k));
  }
  return state_->Run(p, **plan, weight, dout, dx, nullptr, stream);
}

absl::Status Gemm::LinearWeightGradient(const __nv_bfloat16* dout, const __nv_bfloat16* x,
                                        int64_t m, int64_t n, int64_t k, float* dweight,
                                        float* dbias, cudaStream_t stream, bool accumulate) {
  FSDPD_RETURN_IF_ERROR(CheckSizes("Gemm::LinearWeightGradient", m, n, k, {dout, x, dweight}));
  if (m == 0) return absl::OkStatus();
  // Column-major: dweightᵀ[k, n] += xᵀ[k, m] · dout[m, n] (doutᵀ stored n × m, transposed).
  // BGRADB sums op(B) = dout over the reduction dimension m: exactly the bias gradient.
  Problem p;
  p.trans_a = CUBLAS_OP_N;
  p.trans_b = CUBLAS_OP_T;
  p.m = k, p.n = n, p.k = m;
  p.lda = k, p.ldb = n, p.ldd = k;
  p.d_type = CUDA_R_32F;
  p.accumulate = accumulate;
  p.align_a = AlignmentOf(x), p.align_b = AlignmentOf(dout), p.align_d = AlignmentOf(dweight);
  if (dbias != nullptr) {
    p.epilogue = CUBLASLT_EPILOGUE_BGRADB;
    absl::StatusOr<Plan*> plan = state_->GetPlan(p, x, dout, dweight, stream);
    if (!plan.ok()) return plan.status();
    if ((*plan)->available) {
      // BGRADB overwrites its output: straight into dbias when overwriting and dbias is 16-byte
      // aligned, else through the scratch, then added (accumulating) or copied.
      if (!accumulate && AlignmentOf(dbias) == 16) {
        return state_->Run(p, **plan, x, dout, dweight, dbias, stream);
      }
      FSDPD_RETURN_IF_ERROR(state_->EnsureBiasGradient(n));
      FSDPD_RETURN_IF_ERROR(
          state_->Run(p, **plan, x, dout, dweight, state_->bias_gradient, stream));
      if (accumulate) return AddFloat(dbias, state_->bias_gradient, n, dbias, stream);
      CUDA_CHECK(cudaMemcpyAsync(dbias, state_->bias_gradient, static_cast<size_t>(n) * 4,
                                 cudaMemcpyDeviceToDevice, stream));
      return absl::OkStatus();
    }
  }
  p.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  absl::StatusOr<Plan*> plan = state_->GetPlan(p, x, dout, dweight, stream);
  if (!plan.ok()) return plan.status();
  if (!(*plan)->available) {
    return absl::UnimplementedError(absl::StrCat(
        "Gemm::LinearWeightGradient: cuBLASLt has no algorithm for m=", m, " n=", n, " k=", k));
  }
  FSDPD_RETURN_IF_ERROR(state_->Run(p, **plan, x, dout, dweight, nullptr, stream));
  if (dbias == nullptr) return absl::OkStatus();
  FSDPD_RETURN_IF_ERROR(state_->EnsureBiasGradient(ColumnSumScratchFloats(m, n)));
  return ColumnSumBf16(dout, m, n, accumulate, dbias, state_->bias_gradient, stream);
}

absl::Status AddBiasBf16(__nv_bfloat16* out, const __nv_bfloat16* bias, int64_t rows,
                         int64_t columns, cudaStream_t stream) {
  if (rows * columns == 0) return absl::OkStatus();
  AddBiasKernel<<<GridFor(rows * columns, kThreads), kThreads, 0, stream>>>(out, bias, rows,
                                                                            columns);
  CUDA_CHECK_LAUNCH("AddBiasKernel");
  return absl::OkStatus();
}

int64_t Gemm::cached_plans() const { return static_cast<int64_t>(state_->plans.size()); }

int64_t Gemm::unfused_plans() const {
  int64_t count = 0;
  for (const auto& [problem, plan] : state_->plans) {
    if (problem.epilogue != CUBLASLT_EPILOGUE_DEFAULT && !plan.available) ++count;
  }
  return count;
}

}  // namespace fsdpd::cuda
