// Does the cuBLASLt algorithm that is fastest in a short timing stay fastest when the GPU runs
// at its power limit? The engine (kernels/cuda/gemm.cu) picks among the heuristic's candidates
// by timing three runs each, a few milliseconds on a GPU that is not yet power-limited; a
// training step holds an H200 at its 700 W limit, where the SM clock falls to ~1,600 MHz and an
// algorithm's energy per FLOP, not its speed at full clock, sets its rate (bench/RESULTS.md).
//
// For each of the seed's forward product shapes and each heuristic candidate, this prints the
// short-timing rate (3 runs after a warm-up, as the engine times them) and the sustained rate
// (back-to-back runs for --seconds after as long a warm-up), with the candidate's tile, stages,
// cluster shape and split-K. Run it with nvidia-smi sampling clocks and power beside it; each
// candidate's line carries the seconds since the start to match the samples.
// Usage: gemm_power_bench [--candidates N] [--seconds S] [--device N]
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/cuda_check.h"
#include "base/status_macros.h"

namespace fsdpd {
namespace {

using Clock = std::chrono::steady_clock;
const Clock::time_point kStart = Clock::now();

double Elapsed() { return std::chrono::duration<double>(Clock::now() - kStart).count(); }

// out[m, n] = x[m, k] · w[n, k]ᵀ, row-major bf16: column-major out[n, m] = wᵀ-op · x.
struct Problem {
  const char* name;
  int64_t m, n, k;
};

struct Matmul {
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  void* w = nullptr;
  void* x = nullptr;
  void* out = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  cudaStream_t stream = nullptr;

  bool Run(const cublasLtMatmulAlgo_t& algo) {
    const float alpha = 1.0f, beta = 0.0f;
    return cublasLtMatmul(handle, desc, &alpha, w, a, x, b, &beta, out, c, out, c, &algo, workspace,
                          workspace_bytes, stream) == CUBLAS_STATUS_SUCCESS;
  }
  // Milliseconds per run over `runs` back-to-back runs.
  absl::StatusOr<double> Time(const cublasLtMatmulAlgo_t& algo, int runs) {
    cudaEvent_t start, stop;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    CUDA_CHECK(cudaEventRecord(start, stream));
    for (int i = 0; i < runs; ++i) Run(algo);
    CUDA_CHECK(cudaEventRecord(stop, stream));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    CUDA_CHECK(cudaEventDestroy(start));
    CUDA_CHECK(cudaEventDestroy(stop));
    return ms / runs;
  }
};

int ConfigValue(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attribute) {
  int value = 0;
  size_t written = 0;
  uint32_t wide = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&algo, attribute, &wide, sizeof(wide), &written) ==
      CUBLAS_STATUS_SUCCESS) {
    value = static_cast<int>(wide);
  }
  return value;
}

absl::Status RunProblem(cublasLtHandle_t handle, const Problem& p, int candidates, double seconds,
                        void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  Matmul mm;
  mm.handle = handle;
  mm.workspace = workspace;
  mm.workspace_bytes = workspace_bytes;
  mm.stream = stream;
  CUDA_CHECK(cudaMalloc(&mm.w, p.n * p.k * 2));
  CUDA_CHECK(cudaMalloc(&mm.x, p.m * p.k * 2));
  CUDA_CHECK(cudaMalloc(&mm.out, p.m * p.n * 2));
  // Small random-looking bf16 values (0x3c00 ≈ 0.0078 plus low bits): toggling bits cost energy,
  // so zeros would understate the power of real data.
  std::vector<uint16_t> host(static_cast<size_t>(std::max(p.n, p.m) * p.k));
  uint32_t state = 12345;
  for (uint16_t& v : host) {
    state = state * 1664525u + 1013904223u;
    v = static_cast<uint16_t>(0x3c00 | ((state >> 16) & 0x00ff) | ((state >> 8) & 0x8000));
  }
  CUDA_CHECK(cudaMemcpy(mm.w, host.data(), p.n * p.k * 2, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(mm.x, host.data(), p.m * p.k * 2, cudaMemcpyHostToDevice));
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&mm.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t transposed = CUBLAS_OP_T, plain = CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(mm.desc, CUBLASLT_MATMUL_DESC_TRANSA, &transposed,
                                              sizeof(transposed)));
  CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(mm.desc, CUBLASLT_MATMUL_DESC_TRANSB, &plain, sizeof(plain)));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&mm.a, CUDA_R_16BF, p.k, p.n, p.k));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&mm.b, CUDA_R_16BF, p.k, p.m, p.k));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&mm.c, CUDA_R_16BF, p.n, p.m, p.n));
  cublasLtMatmulPreference_t preference;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  const uint64_t bytes = workspace_bytes;
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &bytes, sizeof(bytes)));
  std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<size_t>(candidates));
  int returned = 0;
  CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle, mm.desc, mm.a, mm.b, mm.c, mm.c, preference,
                                              candidates, results.data(), &returned));
  cublasLtMatmulPreferenceDestroy(preference);
  const double flops = 2.0 * p.m * p.n * p.k;
  std::printf("%s: m=%lld n=%lld k=%lld, %d candidates\n", p.name, static_cast<long long>(p.m),
              static_cast<long long>(p.n), static_cast<long long>(p.k), returned);
  std::printf("  %-4s %6s %6s %7s %6s %10s %12s %12s %9s\n", "cand", "tile", "stages", "cluster",
              "splitK", "t (s)", "short TF/s", "sustained", "ratio");
  for (int i = 0; i < returned; ++i) {
    const cublasLtMatmulAlgo_t& algo = results[static_cast<size_t>(i)].algo;
    if (!mm.Run(algo)) {
      std::printf("  %-4d refused to run\n", i);
      continue;
    }
    CUDA_CHECK(cudaStreamSynchronize(stream));
    FSDPD_ASSIGN_OR_RETURN(const double short_ms, mm.Time(algo, 3));
    // Warm-up of `seconds`, so the board reaches its power limit, then `seconds` timed.
    const double per_run = std::max(short_ms, 1e-3);
    const int runs = std::max(1, static_cast<int>(seconds * 1e3 / per_run));
    FSDPD_RETURN_IF_ERROR(mm.Time(algo, runs).status());
    const double at = Elapsed();
    FSDPD_ASSIGN_OR_RETURN(const double sustained_ms, mm.Time(algo, runs));
    const double short_tf = flops / (short_ms * 1e-3) / 1e12;
    const double sustained_tf = flops / (sustained_ms * 1e-3) / 1e12;
    std::printf("  %-4d %6d %6d %7d %6d %10.2f %12.1f %12.1f %9.3f\n", i,
                ConfigValue(algo, CUBLASLT_ALGO_CONFIG_TILE_ID),
                ConfigValue(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID),
                ConfigValue(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID),
                ConfigValue(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM), at, short_tf, sustained_tf,
                sustained_tf / short_tf);
    std::fflush(stdout);
  }
  cublasLtMatrixLayoutDestroy(mm.a);
  cublasLtMatrixLayoutDestroy(mm.b);
  cublasLtMatrixLayoutDestroy(mm.c);
  cublasLtMatmulDescDestroy(mm.desc);
  CUDA_CHECK(cudaFree(mm.w));
  CUDA_CHECK(cudaFree(mm.x));
  CUDA_CHECK(cudaFree(mm.out));
  return absl::OkStatus();
}

absl::Status Run(int candidates, double seconds, int device) {
  CUDA_CHECK(cudaSetDevice(device));
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  cublasLtHandle_t handle;
  CUBLAS_CHECK(cublasLtCreate(&handle));
  const size_t workspace_bytes = size_t{32} << 20;  // as the engine's GemmConfig
  void* workspace = nullptr;
  CUDA_CHECK(cudaMalloc(&workspace, workspace_bytes));
  // The seed's forward products (T = 8 × 1024 tokens).
  const Problem problems[] = {{"ffn.0 forward", 8192, 8192, 2048},
                              {"ffn.2 forward", 8192, 2048, 8192},
                              {"attn.in_proj forward", 8192, 6144, 2048}};
  for (const Problem& problem : problems) {
    FSDPD_RETURN_IF_ERROR(
        RunProblem(handle, problem, candidates, seconds, workspace, workspace_bytes, stream));
  }
  cublasLtDestroy(handle);
  CUDA_CHECK(cudaFree(workspace));
  return absl::OkStatus();
}

}  // namespace
}  // namespace fsdpd

int main(int argc, char** argv) {
  int candidates = 8;
  double seconds = 1.0;
  int device = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--candidates") == 0) candidates = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--seconds") == 0) seconds = std::atof(argv[i + 1]);
    if (std::strcmp(argv[i], "--device") == 0) device = std::atoi(argv[i + 1]);
  }
  if (candidates < 1 || !(seconds > 0.0)) {
    std::fprintf(stderr, "--candidates must be >= 1 and --seconds > 0\n");
    return 2;
  }
  const absl::Status status = fsdpd::Run(candidates, seconds, device);
  if (!status.ok()) {
    std::fprintf(stderr, "gemm_power_bench: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
