#include "kernels/cuda/fp8_gemm.h"

#include <cublasLt.h>

#include <algorithm>
#include <map>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/cuda_check.h"
#include "base/status_macros.h"
#include "spdlog/spdlog.h"

namespace fsdpd::cuda {
namespace {

// One column-major cuBLASLt problem in the TN layout: D[m, n] = op(A)[m, k] · B[k, n] (+ D),
// A stored k × m and B k × n, both with leading dimension k.
struct Problem {
  int64_t m = 0, n = 0, k = 0;
  cudaDataType_t a_type = CUDA_R_8F_E4M3;
  cudaDataType_t b_type = CUDA_R_8F_E4M3;
  cudaDataType_t d_type = CUDA_R_16BF;
  bool accumulate = false;
  bool fast_accumulation = false;

  auto Tie() const {
    return std::make_tuple(m, n, k, static_cast<int>(a_type), static_cast<int>(b_type),
                           static_cast<int>(d_type), accumulate, fast_accumulation);
  }
  bool operator<(const Problem& other) const { return Tie() < other.Tie(); }
};

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool available = false;  // false: cuBLASLt offered no algorithm
  cublasStatus_t heuristic_status = CUBLAS_STATUS_SUCCESS;
};

cudaDataType_t CudaType(Fp8Format format) {
  return format == Fp8Format::kE4M3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2;
}

int64_t ElementSize(cudaDataType_t type) { return type == CUDA_R_32F ? 4 : 2; }

bool Aligned16(const void* pointer) { return reinterpret_cast<uintptr_t>(pointer) % 16 == 0; }

}  // namespace

struct Fp8Gemm::State {
  Fp8GemmConfig config;
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  std::map<Problem, Plan> plans;

  ~State() {
    for (auto& [problem, plan] : plans) {
      if (plan.a != nullptr) cublasLtMatrixLayoutDestroy(plan.a);
      if (plan.b != nullptr) cublasLtMatrixLayoutDestroy(plan.b);
      if (plan.d != nullptr) cublasLtMatrixLayoutDestroy(plan.d);
      if (plan.desc != nullptr) cublasLtMatmulDescDestroy(plan.desc);
    }
    if (handle != nullptr) cublasLtDestroy(handle);
  }

  absl::Status BuildPlan(const Problem& p, Plan* plan);
  absl::Status SetScales(Plan& plan, const float* a_scale, const float* b_scale);
  absl::Status ChooseAlgorithm(const Problem& p, const void* a, const void* b, Plan* plan,
                               cudaStream_t stream);
  absl::StatusOr<Plan*> GetPlan(const Problem& p, const void* a, const void* b,
                                const float* a_scale, const float* b_scale, cudaStream_t stream);
  absl::Status Product(const char* op, const Fp8Operand& left, const Fp8Operand& right,
                       int64_t rows, int64_t cols, int64_t depth, void* out, bool out_fp32,
                       bool accumulate, bool fast_accumulation, cudaStream_t stream);
};

absl::Status Fp8Gemm::State::BuildPlan(const Problem& p, Plan* plan) {
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t transposed = CUBLAS_OP_T, plain = CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &transposed,
                                              sizeof(transposed)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &plain,
                                              sizeof(plain)));
  const int8_t fast = p.fast_accumulation ? 1 : 0;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast,
                                              sizeof(fast)));
  if (config.sm_count_target > 0) {
    const int32_t sms = config.sm_count_target;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET,
                                                &sms, sizeof(sms)));
  }
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->a, p.a_type, p.k, p.m, p.k));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->b, p.b_type, p.k, p.n, p.k));
  // C is D (same pointer, same layout): bf16 C with bf16 D, fp32 with fp32.
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->d, p.d_type, p.m, p.n, p.m));
  return absl::OkStatus();
}

absl::Status Fp8Gemm::State::SetScales(Plan& plan, const float* a_scale, const float* b_scale) {
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                              &a_scale, sizeof(a_scale)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                              &b_scale, sizeof(b_scale)));
  return absl::OkStatus();
}

absl::Status Fp8Gemm::State::ChooseAlgorithm(const Problem& p, const void* a, const void* b,
                                             Plan* plan, cudaStream_t stream) {
  cublasLtMatmulPreference_t preference = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  const uint64_t workspace_bytes = static_cast<uint64_t>(config.workspace_bytes);
  const uint32_t alignment = 16;  // every pointer is checked to be 16-byte aligned
  cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                       &workspace_bytes, sizeof(workspace_bytes));
  for (const auto attribute :
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
    cublasLtMatmulPreferenceSetAttribute(preference, attribute, &alignment, sizeof(alignment));
  }
  std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<size_t>(config.candidates));
  int returned = 0;
  plan->heuristic_status =
      cublasLtMatmulAlgoGetHeuristic(handle, plan->desc, plan->a, plan->b, plan->d, plan->d,
                                     preference, config.candidates, results.data(), &returned);
  cublasLtMatmulPreferenceDestroy(preference);
  if (plan->heuristic_status != CUBLAS_STATUS_SUCCESS || returned == 0) {
    plan->available = false;
    return absl::OkStatus();
  }
  plan->available = true;
  plan->algo = results[0].algo;
  if (returned == 1) return absl::OkStatus();

  // Candidates are timed into a zeroed scratch output, so that an accumulating product leaves
  // the caller's untouched. Without room for it, the heuristic's first choice stands.
  const size_t scratch_bytes = static_cast<size_t>(p.m * p.n * ElementSize(p.d_type));
  void* scratch = nullptr;
  if (cudaMalloc(&scratch, scratch_bytes) != cudaSuccess) {
    cudaGetLastError();
    spdlog::warn("fp8 gemm: no memory to time algorithms for m={} n={} k={}; using the first", p.m,
                 p.n, p.k);
    return absl::OkStatus();
  }
  absl::Status status = absl::OkStatus();
  cudaEvent_t start = nullptr, stop = nullptr;
  if (cudaMemsetAsync(scratch, 0, scratch_bytes, stream) != cudaSuccess ||
      cudaEventCreate(&start) != cudaSuccess || cudaEventCreate(&stop) != cudaSuccess) {
    status = absl::InternalError(absl::StrCat("fp8 gemm: cannot prepare the algorithm timing: ",
                                              cudaGetErrorString(cudaGetLastError())));
  }
  const float alpha = 1.0f;
  const float beta = p.accumulate ? 1.0f : 0.0f;
  float best = -1.0f;
  cublasStatus_t last_refusal = CUBLAS_STATUS_SUCCESS;
  for (int i = 0; i < returned && status.ok(); ++i) {
    auto launch = [&]() {
      return cublasLtMatmul(handle, plan->desc, &alpha, a, plan->a, b, plan->b, &beta, scratch,
                            plan->d, scratch, plan->d, &results[i].algo, workspace,
                            static_cast<size_t>(config.workspace_bytes), stream);
    };
    last_refusal = launch();
    if (last_refusal != CUBLAS_STATUS_SUCCESS) continue;  // a candidate may still refuse to run
    cudaEventRecord(start, stream);
    bool ran = true;
    for (int r = 0; r < config.timing_repeats && ran; ++r) ran = launch() == CUBLAS_STATUS_SUCCESS;
    cudaEventRecord(stop, stream);
    if (cudaEventSynchronize(stop) != cudaSuccess) {
      status = absl::InternalError(absl::StrCat(
          "fp8 gemm: timing candidate ", i, " failed: ", cudaGetErrorString(cudaGetLastError())));
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
  cudaFree(scratch);
  if (status.ok() && best < 0.0f) {
    status = absl::InternalError(absl::StrCat(
        "fp8 gemm: none of the heuristic's ", returned, " algorithms ran for m=", p.m, " n=", p.n,
        " k=", p.k, " (the last said ", cublasLtGetStatusName(last_refusal), ")"));
  }
  spdlog::debug("fp8 gemm: m={} n={} k={} chose among {} candidates: {:.3f} ms", p.m, p.n, p.k,
                returned, best / static_cast<float>(std::max(config.timing_repeats, 1)));
  return status;
}

absl::StatusOr<Plan*> Fp8Gemm::State::GetPlan(const Problem& p, const void* a, const void* b,
                                              const float* a_scale, const float* b_scale,
                                              cudaStream_t stream) {
  auto found = plans.find(p);
  if (found != plans.end()) return &found->second;
  auto [entry, inserted] = plans.emplace(p, Plan{});  // destroyed with the state
  Plan& plan = entry->second;
  absl::Status status = BuildPlan(p, &plan);
  // The scale pointers are set before the heuristic: they select the scaled FP8 kernels.
  if (status.ok()) status = SetScales(plan, a_scale, b_scale);
  if (status.ok()) status = ChooseAlgorithm(p, a, b, &plan, stream);
  if (!status.ok()) {
    // Not cached: the next call with this problem tries again rather than finding a half plan.
    if (plan.a != nullptr) cublasLtMatrixLayoutDestroy(plan.a);
    if (plan.b != nullptr) cublasLtMatrixLayoutDestroy(plan.b);
    if (plan.d != nullptr) cublasLtMatrixLayoutDestroy(plan.d);
    if (plan.desc != nullptr) cublasLtMatmulDescDestroy(plan.desc);
    plans.erase(entry);
    return status;
  }
  return &plan;
}

absl::Status Fp8Gemm::State::Product(const char* op, const Fp8Operand& left,
                                     const Fp8Operand& right, int64_t rows, int64_t cols,
                                     int64_t depth, void* out, bool out_fp32, bool accumulate,
                                     bool fast_accumulation, cudaStream_t stream) {
  if (rows < 0 || cols <= 0 || depth <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": sizes must be positive, got rows=", rows,
                                                   " cols=", cols, " depth=", depth));
  }
  if (rows == 0) return absl::OkStatus();
  if (left.data == nullptr || right.data == nullptr || out == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": null matrix pointer"));
  }
  if (left.format == Fp8Format::kE5M2 && right.format == Fp8Format::kE5M2) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": cuBLASLt has no e5m2 × e5m2 product; make one operand e4m3"));
  }
  const int64_t out_multiple = out_fp32 ? 4 : 8;  // 16 bytes of output elements
  if (depth % 16 != 0 || cols % out_multiple != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": cuBLASLt's FP8 products need 16-byte leading dimensions: the reduction dimension (",
        depth, ") a multiple of 16 and the output's row length (", cols, ") a multiple of ",
        out_multiple));
  }
  if (!Aligned16(left.data) || !Aligned16(right.data) || !Aligned16(out)) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": FP8 operands and the output must be 16-byte aligned"));
  }
  // cuBLASLt runs none of its FP8 algorithms on a descale 8 bytes past a 16-byte boundary: each
  // launch returns NOT_SUPPORTED although the heuristic offered them (measured on an H200 with
  // cuBLASLt 13.1, bench/RESULTS.md).
  if ((left.descale != nullptr && !Aligned16(left.descale)) ||
      (right.descale != nullptr && !Aligned16(right.descale))) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": cuBLASLt's FP8 products need 16-byte aligned descale pointers"));
  }
  // Row-major out[rows, cols] = left · rightᵀ is column-major outᵀ[cols, rows] =
  // op(right)[cols, depth] · leftᵀ[depth, rows], right stored depth × cols (transposed).
  Problem p;
  p.m = cols, p.n = rows, p.k = depth;
  p.a_type = CudaType(right.format);
  p.b_type = CudaType(left.format);
  p.d_type = out_fp32 ? CUDA_R_32F : CUDA_R_16BF;
  p.accumulate = accumulate;
  p.fast_accumulation = fast_accumulation;
  FSDPD_ASSIGN_OR_RETURN(Plan * plan,
                         GetPlan(p, right.data, left.data, right.descale, left.descale, stream));
  if (!plan->available) {
    return absl::UnimplementedError(absl::StrCat(
        op, ": cuBLASLt offers no FP8 algorithm for ", Fp8FormatName(left.format), "[", rows, ", ",
        depth, "] · ", Fp8FormatName(right.format), "[", cols, ", ", depth, "]ᵀ → ",
        out_fp32 ? "fp32" : "bf16", " (heuristic: ", cublasLtGetStatusName(plan->heuristic_status),
        "; FP8 needs compute capability 8.9 or newer)"));
  }
  FSDPD_RETURN_IF_ERROR(SetScales(*plan, right.descale, left.descale));
  const float alpha = 1.0f;
  const float beta = accumulate ? 1.0f : 0.0f;
  CUBLAS_CHECK(cublasLtMatmul(handle, plan->desc, &alpha, right.data, plan->a, left.data, plan->b,
                              &beta, out, plan->d, out, plan->d, &plan->algo, workspace,
                              static_cast<size_t>(config.workspace_bytes), stream));
  return absl::OkStatus();
}

Fp8Gemm::Fp8Gemm(std::unique_ptr<State> state) : state_(std::move(state)) {}
Fp8Gemm::~Fp8Gemm() = default;

absl::StatusOr<std::unique_ptr<Fp8Gemm>> Fp8Gemm::Create(void* workspace,
                                                         const Fp8GemmConfig& config) {
  if (workspace == nullptr || config.workspace_bytes <= 0) {
    return absl::InvalidArgumentError("Fp8Gemm::Create: a device workspace is required");
  }
  if (config.candidates < 1 || config.timing_repeats < 1 || config.sm_count_target < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Fp8Gemm::Create: candidates (", config.candidates, ") and timing_repeats (",
                     config.timing_repeats, ") must be >= 1, sm_count_target (",
                     config.sm_count_target, ") >= 0"));
  }
  auto state = std::make_unique<State>();
  state->config = config;
  state->workspace = workspace;
  CUBLAS_CHECK(cublasLtCreate(&state->handle));
  return std::unique_ptr<Fp8Gemm>(new Fp8Gemm(std::move(state)));
}

absl::Status Fp8Gemm::Forward(const Fp8Operand& x, const Fp8Operand& weight, int64_t m, int64_t n,
                              int64_t k, __nv_bfloat16* out, cudaStream_t stream) {
  return state_->Product("Fp8Gemm::Forward", x, weight, m, n, k, out, /*out_fp32=*/false,
                         /*accumulate=*/false, state_->config.fast_accumulation_forward, stream);
}

absl::Status Fp8Gemm::InputGradient(const Fp8Operand& dout, const Fp8Operand& weight_transposed,
                                    int64_t m, int64_t n, int64_t k, __nv_bfloat16* dx,
                                    cudaStream_t stream) {
  return state_->Product("Fp8Gemm::InputGradient", dout, weight_transposed, m, k, n, dx,
                         /*out_fp32=*/false, /*accumulate=*/false,
                         state_->config.fast_accumulation_gradients, stream);
}

absl::Status Fp8Gemm::WeightGradient(const Fp8Operand& dout_transposed,
                                     const Fp8Operand& x_transposed, int64_t m, int64_t n,
                                     int64_t k, float* dweight, cudaStream_t stream,
                                     bool accumulate) {
  return state_->Product("Fp8Gemm::WeightGradient", dout_transposed, x_transposed, n, k, m, dweight,
                         /*out_fp32=*/true, accumulate, state_->config.fast_accumulation_gradients,
                         stream);
}

absl::Status Fp8Gemm::Matmul(const Fp8Operand& left, const Fp8Operand& right, int64_t rows,
                             int64_t cols, int64_t depth, void* out, bool out_fp32, bool accumulate,
                             bool fast_accumulation, cudaStream_t stream) {
  return state_->Product("Fp8Gemm::Matmul", left, right, rows, cols, depth, out, out_fp32,
                         accumulate, fast_accumulation, stream);
}

int64_t Fp8Gemm::cached_plans() const { return static_cast<int64_t>(state_->plans.size()); }

}  // namespace fsdpd::cuda
