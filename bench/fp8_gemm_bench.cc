// How much faster would the seed's linear layers run with FP8 (kernels/cuda/fp8_gemm.h) than
// with the bf16 products the engine runs now (kernels/cuda/gemm.h), counting the casts FP8
// needs? For each linear layer of the seed (T = 8 × 1024 tokens, dim 2048, FFN 8192, vocab
// 32000) and each of its three products per step, forward Y = X·Wᵀ, input gradient
// dX = dY·W and weight gradient dW += dYᵀ·X (fp32, accumulated), this prints the bf16 time,
// the FP8 time and the share of the casts that product needs.
//
// Each tensor is cast once a step and serves two products: W (e4m3, with Wᵀ) forward and the
// input gradient, X (e4m3, with Xᵀ) forward and the weight gradient, dY (e5m2, with dYᵀ) both
// gradients; a product's line carries half of each of its two operands' casts, the layer's
// line all three. A cast is timed as the step would run it under current scaling
// (kernels/cuda/fp8.h): zero the amax, the cast computing the amax of its input (the stand-in
// for the producer's part), the scale kernel. `net` = bf16 time / (FP8 time + casts), `gemm` the
// same without casts. `diff%` compares the FP8 product with the bf16 one on the first 64 output
// rows: the RMS of the difference relative to the RMS of the bf16 result (a sanity check, not an
// accuracy study).
//
// Times are medians of --runs single runs after --warmup runs, each run timed by its own pair
// of events; before each timed run the L2 cache is flushed (a write of twice its size), since
// in a step other work evicts the operands (--no-flush keeps them). With --seconds S, each
// layer's bf16 step (three products) and FP8 step (three casts, three products) then also run
// back-to-back for S seconds after S seconds of warm-up, to see the rates at the board's power
// limit; run nvidia-smi beside it for clocks and power (each line carries the seconds since the
// start, to match its samples).
// Usage: fp8_gemm_bench [--runs N] [--warmup N] [--device N] [--seconds S] [--no-flush]
//                       [--grad-e4m3] [--fast-accum-forward]
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "base/cuda_check.h"
#include "base/status_macros.h"
#include "kernels/cuda/fp8.h"
#include "kernels/cuda/fp8_gemm.h"
#include "kernels/cuda/gemm.h"

namespace fsdpd {
namespace {

using Clock = std::chrono::steady_clock;
const Clock::time_point kStart = Clock::now();
double Elapsed() { return std::chrono::duration<double>(Clock::now() - kStart).count(); }

constexpr int64_t kTokens = 8 * 1024;
constexpr int64_t kCompared = 64;  // output rows the sanity check compares

struct Options {
  int runs = 20;
  int warmup = 5;
  int device = 0;
  double seconds = 0.0;
  bool flush = true;
  bool grad_e4m3 = false;
  bool fast_accumulation_forward = false;
};

// A linear layer: weight [n, k], out[T, n] = x[T, k] · weightᵀ.
struct Layer {
  const char* name;
  int64_t n, k;
};

class DeviceMemory {
 public:
  DeviceMemory() = default;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  ~DeviceMemory() {
    if (pointer_ != nullptr) cudaFree(pointer_);
  }
  absl::Status Allocate(size_t bytes) {
    CUDA_CHECK(cudaMalloc(&pointer_, bytes));
    bytes_ = bytes;
    return absl::OkStatus();
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(pointer_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* pointer_ = nullptr;
  size_t bytes_ = 0;
};

// bf16 values of about N(0, sigma²) (a sum of four uniforms), from a fixed seed: a pool of 2^24
// values is made once and copied over the tensor as often as needed. Real-looking bits matter
// for the power drawn at the limit; the period does not matter to the products' times.
class Filler {
 public:
  Filler() : pool_(size_t{1} << 24) {
    uint32_t state = 20261202;
    for (float& v : pool_) {
      float sum = 0.0f;
      for (int i = 0; i < 4; ++i) {
        state = state * 1664525u + 1013904223u;
        sum += static_cast<float>(state >> 8) * (1.0f / 16777216.0f) - 0.5f;
      }
      v = sum * 1.7320508f;  // variance of four uniforms on [-0.5, 0.5) is 1/3
    }
  }
  absl::Status Fill(__nv_bfloat16* device, int64_t count, float sigma) {
    std::vector<__nv_bfloat16> bits(std::min<size_t>(pool_.size(), static_cast<size_t>(count)));
    for (size_t i = 0; i < bits.size(); ++i) bits[i] = __float2bfloat16(pool_[i] * sigma);
    for (int64_t done = 0; done < count;) {
      const int64_t part = std::min<int64_t>(static_cast<int64_t>(bits.size()), count - done);
      CUDA_CHECK(cudaMemcpy(device + done, bits.data(), static_cast<size_t>(part) * 2,
                            cudaMemcpyHostToDevice));
      done += part;
    }
    return absl::OkStatus();
  }

 private:
  std::vector<float> pool_;
};

class Timer {
 public:
  Timer(const Options& options, cudaStream_t stream, void* flush, size_t flush_bytes)
      : options_(options), stream_(stream), flush_(flush), flush_bytes_(flush_bytes) {}

  // The median milliseconds of one run of `op`.
  absl::StatusOr<double> Median(const std::function<absl::Status()>& op) {
    for (int i = 0; i < options_.warmup; ++i) FSDPD_RETURN_IF_ERROR(op());
    const int runs = options_.runs;
    std::vector<cudaEvent_t> starts(static_cast<size_t>(runs)), stops(starts.size());
    for (int i = 0; i < runs; ++i) {
      CUDA_CHECK(cudaEventCreate(&starts[i]));
      CUDA_CHECK(cudaEventCreate(&stops[i]));
    }
    absl::Status status = absl::OkStatus();
    for (int i = 0; i < runs && status.ok(); ++i) {
      if (flush_ != nullptr) {
        status.Update(ToStatus(cudaMemsetAsync(flush_, i & 0xff, flush_bytes_, stream_)));
      }
      status.Update(ToStatus(cudaEventRecord(starts[i], stream_)));
      status.Update(op());
      status.Update(ToStatus(cudaEventRecord(stops[i], stream_)));
    }
    status.Update(ToStatus(cudaStreamSynchronize(stream_)));
    std::vector<double> ms;
    for (int i = 0; i < runs; ++i) {
      float elapsed = 0.0f;
      if (status.ok() && cudaEventElapsedTime(&elapsed, starts[i], stops[i]) == cudaSuccess) {
        ms.push_back(elapsed);
      }
      cudaEventDestroy(starts[i]);
      cudaEventDestroy(stops[i]);
    }
    FSDPD_RETURN_IF_ERROR(status);
    if (ms.size() != static_cast<size_t>(runs)) return absl::InternalError("event timing failed");
    std::sort(ms.begin(), ms.end());
    return runs % 2 == 1 ? ms[runs / 2] : 0.5 * (ms[runs / 2 - 1] + ms[runs / 2]);
  }

  // Milliseconds per run of `op` run back-to-back for `seconds`, after as long a warm-up;
  // `estimate_ms` (one run) sets the count.
  absl::StatusOr<double> Sustained(const std::function<absl::Status()>& op, double estimate_ms,
                                   double seconds) {
    const int runs = std::max(1, static_cast<int>(seconds * 1e3 / std::max(estimate_ms, 1e-3)));
    for (int i = 0; i < runs; ++i) FSDPD_RETURN_IF_ERROR(op());
    cudaEvent_t start, stop;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    CUDA_CHECK(cudaEventRecord(start, stream_));
    for (int i = 0; i < runs; ++i) FSDPD_RETURN_IF_ERROR(op());
    CUDA_CHECK(cudaEventRecord(stop, stream_));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    CUDA_CHECK(cudaEventDestroy(start));
    CUDA_CHECK(cudaEventDestroy(stop));
    return ms / runs;
  }

 private:
  static absl::Status ToStatus(cudaError_t error) {
    if (error == cudaSuccess) return absl::OkStatus();
    return absl::InternalError(cudaGetErrorString(error));
  }

  const Options& options_;
  cudaStream_t stream_;
  void* flush_;
  size_t flush_bytes_;
};

// The RMS of (a − b) over the RMS of b, for the first `count` elements of two device arrays.
template <typename T>
absl::StatusOr<double> RelativeRmsDifference(const T* a, const T* b, int64_t count) {
  std::vector<T> host_a(static_cast<size_t>(count)), host_b(static_cast<size_t>(count));
  CUDA_CHECK(cudaMemcpy(host_a.data(), a, count * sizeof(T), cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(host_b.data(), b, count * sizeof(T), cudaMemcpyDeviceToHost));
  double difference = 0.0, reference = 0.0;
  for (int64_t i = 0; i < count; ++i) {
    double x, y;
    if constexpr (sizeof(T) == 2) {
      x = __bfloat162float(host_a[i]);
      y = __bfloat162float(host_b[i]);
    } else {
      x = host_a[i];
      y = host_b[i];
    }
    difference += (x - y) * (x - y);
    reference += y * y;
  }
  return reference > 0.0 ? std::sqrt(difference / reference) : std::sqrt(difference);
}

// One tensor's FP8 form: the values, the transpose, amax, scale and descale.
struct Fp8Tensor {
  // scalars: amax, scale, descale, 16 bytes apart (cuBLASLt reads the descale only 16-byte
  // aligned).
  DeviceMemory data, transposed, scalars;
  cuda::Fp8Format format = cuda::Fp8Format::kE4M3;
  int64_t rows = 0, cols = 0;

  absl::Status Allocate(int64_t r, int64_t c, cuda::Fp8Format f) {
    rows = r, cols = c, format = f;
    FSDPD_RETURN_IF_ERROR(data.Allocate(static_cast<size_t>(r * c)));
    FSDPD_RETURN_IF_ERROR(transposed.Allocate(static_cast<size_t>(r * c)));
    FSDPD_RETURN_IF_ERROR(scalars.Allocate(12 * sizeof(float)));
    CUDA_CHECK(cudaMemset(scalars.as<float>(), 0, 12 * sizeof(float)));
    return absl::OkStatus();
  }
  float* amax() const { return scalars.as<float>(); }
  float* scale() const { return scalars.as<float>() + 4; }
  float* descale() const { return scalars.as<float>() + 8; }
  cuda::Fp8Operand Plain() const { return {data.as<uint8_t>(), format, descale()}; }
  cuda::Fp8Operand Transposed() const { return {transposed.as<uint8_t>(), format, descale()}; }

  // What a step runs for this tensor: zero the amax, cast (and transpose) computing the amax,
  // scale and descale from it.
  absl::Status Cast(const __nv_bfloat16* source, cudaStream_t stream) const {
    CUDA_CHECK(cudaMemsetAsync(amax(), 0, sizeof(float), stream));
    FSDPD_RETURN_IF_ERROR(cuda::CastToFp8(source, rows, cols, format, scale(), data.as<uint8_t>(),
                                          transposed.as<uint8_t>(), amax(), stream));
    return cuda::Fp8ScaleFromAmax(amax(), format, scale(), descale(), stream);
  }
};

struct Totals {
  double bf16 = 0.0, fp8 = 0.0, casts = 0.0, flops = 0.0;
  void Add(const Totals& other) {
    bf16 += other.bf16;
    fp8 += other.fp8;
    casts += other.casts;
    flops += other.flops;
  }
};

void PrintRow(const char* layer, const char* gemm, int64_t m, int64_t n, int64_t k, double flops,
              double bf16_ms, double fp8_ms, double cast_ms, double diff) {
  const auto rate = [&](double ms) { return flops / (ms * 1e-3) / 1e12; };
  if (m > 0) {
    std::printf("%-8s %-5s %5lld %5lld %5lld |", layer, gemm, static_cast<long long>(m),
                static_cast<long long>(n), static_cast<long long>(k));
  } else {
    std::printf("%-8s %-5s %17s |", layer, gemm, "");
  }
  std::printf(" %8.3f %5.0f | %8.3f %5.0f | %7.3f | %5.2f %5.2f |", bf16_ms, rate(bf16_ms), fp8_ms,
              rate(fp8_ms), cast_ms, bf16_ms / fp8_ms, bf16_ms / (fp8_ms + cast_ms));
  if (diff >= 0.0) {
    std::printf(" %5.2f\n", 100.0 * diff);
  } else {
    std::printf("\n");
  }
}

absl::Status RunLayer(const Layer& layer, const Options& options, cuda::Gemm& gemm,
                      cuda::Fp8Gemm& fp8, Filler& filler, Timer& timer, cudaStream_t stream,
                      Totals& totals) {
  const int64_t t = kTokens, n = layer.n, k = layer.k;
  const double flops = 2.0 * t * n * k;
  DeviceMemory x, w, dy, out_bf16, out_fp8, dx_bf16, dx_fp8, dw_bf16, dw_fp8;
  FSDPD_RETURN_IF_ERROR(x.Allocate(static_cast<size_t>(t * k * 2)));
  FSDPD_RETURN_IF_ERROR(w.Allocate(static_cast<size_t>(n * k * 2)));
  FSDPD_RETURN_IF_ERROR(dy.Allocate(static_cast<size_t>(t * n * 2)));
  FSDPD_RETURN_IF_ERROR(out_bf16.Allocate(static_cast<size_t>(t * n * 2)));
  FSDPD_RETURN_IF_ERROR(out_fp8.Allocate(static_cast<size_t>(t * n * 2)));
  FSDPD_RETURN_IF_ERROR(dx_bf16.Allocate(static_cast<size_t>(t * k * 2)));
  FSDPD_RETURN_IF_ERROR(dx_fp8.Allocate(static_cast<size_t>(t * k * 2)));
  FSDPD_RETURN_IF_ERROR(dw_bf16.Allocate(static_cast<size_t>(n * k * 4)));
  FSDPD_RETURN_IF_ERROR(dw_fp8.Allocate(static_cast<size_t>(n * k * 4)));
  // Activations of unit scale, weights as initialised (N(0, 0.02)), gradients small.
  FSDPD_RETURN_IF_ERROR(filler.Fill(x.as<__nv_bfloat16>(), t * k, 1.0f));
  FSDPD_RETURN_IF_ERROR(filler.Fill(w.as<__nv_bfloat16>(), n * k, 0.02f));
  FSDPD_RETURN_IF_ERROR(filler.Fill(dy.as<__nv_bfloat16>(), t * n, 1e-4f));
  CUDA_CHECK(cudaMemset(dw_bf16.as<float>(), 0, dw_bf16.bytes()));
  CUDA_CHECK(cudaMemset(dw_fp8.as<float>(), 0, dw_fp8.bytes()));

  const cuda::Fp8Format grad_format =
      options.grad_e4m3 ? cuda::Fp8Format::kE4M3 : cuda::Fp8Format::kE5M2;
  Fp8Tensor xq, wq, dyq;
  FSDPD_RETURN_IF_ERROR(xq.Allocate(t, k, cuda::Fp8Format::kE4M3));
  FSDPD_RETURN_IF_ERROR(wq.Allocate(n, k, cuda::Fp8Format::kE4M3));
  FSDPD_RETURN_IF_ERROR(dyq.Allocate(t, n, grad_format));
  // Twice, so that the second cast runs with the scale of the first's amax.
  for (int i = 0; i < 2; ++i) {
    FSDPD_RETURN_IF_ERROR(xq.Cast(x.as<__nv_bfloat16>(), stream));
    FSDPD_RETURN_IF_ERROR(wq.Cast(w.as<__nv_bfloat16>(), stream));
    FSDPD_RETURN_IF_ERROR(dyq.Cast(dy.as<__nv_bfloat16>(), stream));
  }

  const auto* xb = x.as<__nv_bfloat16>();
  const auto* wb = w.as<__nv_bfloat16>();
  const auto* dyb = dy.as<__nv_bfloat16>();
  const std::function<absl::Status()> bf16_ops[3] = {
      [&] {
        return gemm.LinearForward(xb, wb, nullptr, t, n, k, out_bf16.as<__nv_bfloat16>(), stream);
      },
      [&] {
        return gemm.LinearInputGradient(dyb, wb, t, n, k, dx_bf16.as<__nv_bfloat16>(), stream);
      },
      [&] {
        return gemm.LinearWeightGradient(dyb, xb, t, n, k, dw_bf16.as<float>(), nullptr, stream);
      }};
  const std::function<absl::Status()> fp8_ops[3] = {
      [&] {
        return fp8.Forward(xq.Plain(), wq.Plain(), t, n, k, out_fp8.as<__nv_bfloat16>(), stream);
      },
      [&] {
        return fp8.InputGradient(dyq.Plain(), wq.Transposed(), t, n, k, dx_fp8.as<__nv_bfloat16>(),
                                 stream);
      },
      [&] {
        return fp8.WeightGradient(dyq.Transposed(), xq.Transposed(), t, n, k, dw_fp8.as<float>(),
                                  stream);
      }};
  const std::function<absl::Status()> casts[3] = {[&] { return xq.Cast(xb, stream); },
                                                  [&] { return wq.Cast(wb, stream); },
                                                  [&] { return dyq.Cast(dyb, stream); }};

  double cast_ms[3];
  for (int i = 0; i < 3; ++i) {
    FSDPD_ASSIGN_OR_RETURN(cast_ms[i], timer.Median(casts[i]));
  }
  // Each product's share: half of each of its two operands' casts (x, w, dy = 0, 1, 2).
  const double share[3] = {0.5 * (cast_ms[0] + cast_ms[1]), 0.5 * (cast_ms[2] + cast_ms[1]),
                           0.5 * (cast_ms[2] + cast_ms[0])};
  const char* names[3] = {"fwd", "dgrad", "wgrad"};
  const int64_t shape[3][3] = {{t, n, k}, {t, k, n}, {n, k, t}};  // out rows, cols, depth
  double bf16_ms[3], fp8_ms[3], diff[3];
  for (int i = 0; i < 3; ++i) {
    FSDPD_ASSIGN_OR_RETURN(bf16_ms[i], timer.Median(bf16_ops[i]));
    FSDPD_ASSIGN_OR_RETURN(fp8_ms[i], timer.Median(fp8_ops[i]));
  }
  // The sanity check, with the weight gradients overwritten rather than accumulated.
  FSDPD_RETURN_IF_ERROR(
      gemm.LinearWeightGradient(dyb, xb, t, n, k, dw_bf16.as<float>(), nullptr, stream, false));
  FSDPD_RETURN_IF_ERROR(fp8.WeightGradient(dyq.Transposed(), xq.Transposed(), t, n, k,
                                           dw_fp8.as<float>(), stream, false));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  FSDPD_ASSIGN_OR_RETURN(
      diff[0], RelativeRmsDifference(out_fp8.as<__nv_bfloat16>(), out_bf16.as<__nv_bfloat16>(),
                                     kCompared * n));
  FSDPD_ASSIGN_OR_RETURN(
      diff[1], RelativeRmsDifference(dx_fp8.as<__nv_bfloat16>(), dx_bf16.as<__nv_bfloat16>(),
                                     kCompared * k));
  FSDPD_ASSIGN_OR_RETURN(
      diff[2], RelativeRmsDifference(dw_fp8.as<float>(), dw_bf16.as<float>(), kCompared * k));

  Totals layer_totals;
  for (int i = 0; i < 3; ++i) {
    PrintRow(layer.name, names[i], shape[i][0], shape[i][1], shape[i][2], flops, bf16_ms[i],
             fp8_ms[i], share[i], diff[i]);
    layer_totals.bf16 += bf16_ms[i];
    layer_totals.fp8 += fp8_ms[i];
  }
  layer_totals.casts = cast_ms[0] + cast_ms[1] + cast_ms[2];
  layer_totals.flops = 3.0 * flops;
  PrintRow(layer.name, "step", 0, 0, 0, layer_totals.flops, layer_totals.bf16, layer_totals.fp8,
           layer_totals.casts, -1.0);
  std::printf("%-8s casts (ms): x %.3f, w %.3f, dy %.3f  (zero amax, cast+transpose+amax, scale)\n",
              "", cast_ms[0], cast_ms[1], cast_ms[2]);
  totals.Add(layer_totals);

  if (options.seconds > 0.0) {
    const auto bf16_step = [&]() -> absl::Status {
      for (const auto& op : bf16_ops) FSDPD_RETURN_IF_ERROR(op());
      return absl::OkStatus();
    };
    const auto fp8_step = [&]() -> absl::Status {
      for (const auto& cast : casts) FSDPD_RETURN_IF_ERROR(cast());
      for (const auto& op : fp8_ops) FSDPD_RETURN_IF_ERROR(op());
      return absl::OkStatus();
    };
    FSDPD_ASSIGN_OR_RETURN(const double bf16_sustained,
                           timer.Sustained(bf16_step, layer_totals.bf16, options.seconds));
    const double bf16_at = Elapsed();
    FSDPD_ASSIGN_OR_RETURN(
        const double fp8_sustained,
        timer.Sustained(fp8_step, layer_totals.fp8 + layer_totals.casts, options.seconds));
    const double fp8_at = Elapsed();
    // ms a step and TF/s; @: seconds since the start when that timing ended.
    std::printf(
        "%-8s sustained: bf16 %.3f ms %.0f TF/s @%.0f s | fp8+casts %.3f ms %.0f TF/s "
        "@%.0f s | net %.2f\n",
        "", bf16_sustained, layer_totals.flops / (bf16_sustained * 1e9), bf16_at, fp8_sustained,
        layer_totals.flops / (fp8_sustained * 1e9), fp8_at, bf16_sustained / fp8_sustained);
  }
  std::fflush(stdout);
  return absl::OkStatus();
}

absl::Status Run(const Options& options) {
  CUDA_CHECK(cudaSetDevice(options.device));
  cudaDeviceProp properties;
  CUDA_CHECK(cudaGetDeviceProperties(&properties, options.device));
  int clock_khz = 0, l2_bytes = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, options.device));
  CUDA_CHECK(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, options.device));
  if (properties.major < 9 && !(properties.major == 8 && properties.minor == 9)) {
    return absl::FailedPreconditionError(
        absl::StrCat(properties.name, " (sm_", properties.major, properties.minor,
                     ") has no FP8 tensor cores; FP8 needs sm_89 or newer"));
  }
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  DeviceMemory workspace, fp8_workspace, flush;
  const int64_t workspace_bytes = cuda::GemmConfig{}.workspace_bytes;
  FSDPD_RETURN_IF_ERROR(workspace.Allocate(static_cast<size_t>(workspace_bytes)));
  FSDPD_RETURN_IF_ERROR(fp8_workspace.Allocate(static_cast<size_t>(workspace_bytes)));
  if (options.flush) FSDPD_RETURN_IF_ERROR(flush.Allocate(2 * static_cast<size_t>(l2_bytes)));
  FSDPD_ASSIGN_OR_RETURN(std::unique_ptr<cuda::Gemm> gemm,
                         cuda::Gemm::Create(workspace.as<void>(), cuda::GemmConfig{}));
  cuda::Fp8GemmConfig fp8_config;
  fp8_config.fast_accumulation_forward = options.fast_accumulation_forward;
  FSDPD_ASSIGN_OR_RETURN(std::unique_ptr<cuda::Fp8Gemm> fp8,
                         cuda::Fp8Gemm::Create(fp8_workspace.as<void>(), fp8_config));
  Timer timer(options, stream, options.flush ? flush.as<void>() : nullptr, flush.bytes());
  Filler filler;

  std::printf(
      "%s (sm_%d%d, %d SMs, peak SM clock %d MHz), T=%lld, median of %d runs after %d, "
      "L2 %s\n",
      properties.name, properties.major, properties.minor, properties.multiProcessorCount,
      clock_khz / 1000, static_cast<long long>(kTokens), options.runs, options.warmup,
      options.flush ? "flushed" : "kept");
  std::printf(
      "x, w e4m3; dy %s; forward fast accumulation %s; gradients precise; "
      "casts = amortized share\n",
      options.grad_e4m3 ? "e4m3" : "e5m2", options.fast_accumulation_forward ? "on" : "off");
  std::printf(
      "out[M, N] = [M, K]·[N, K]ᵀ; speed-up = bf16 / fp8 (gemm: the product alone, net: "
      "with casts)\n");
  std::printf("%-8s %-5s %5s %5s %5s | %8s %5s | %8s %5s | %7s | %5s %5s | %5s\n", "layer", "gemm",
              "M", "N", "K", "bf16 ms", "TF/s", "fp8 ms", "TF/s", "cast ms", "gemm", "net",
              "diff%");
  const Layer layers[] = {{"in_proj", 6144, 2048},
                          {"out_proj", 2048, 2048},
                          {"ffn.0", 8192, 2048},
                          {"ffn.2", 2048, 8192},
                          {"head", 32000, 2048}};
  Totals block, all;
  for (const Layer& layer : layers) {
    Totals totals;
    FSDPD_RETURN_IF_ERROR(RunLayer(layer, options, *gemm, *fp8, filler, timer, stream, totals));
    if (std::strcmp(layer.name, "head") != 0) block.Add(totals);
    all.Add(totals);
  }
  PrintRow("block", "step", 0, 0, 0, block.flops, block.bf16, block.fp8, block.casts, -1.0);
  PrintRow("all five", "step", 0, 0, 0, all.flops, all.bf16, all.fp8, all.casts, -1.0);
  CUDA_CHECK(cudaStreamDestroy(stream));
  return absl::OkStatus();
}

}  // namespace
}  // namespace fsdpd

int main(int argc, char** argv) {
  fsdpd::Options options;
  for (int i = 1; i < argc; ++i) {
    const bool has_value = i + 1 < argc;
    if (std::strcmp(argv[i], "--runs") == 0 && has_value) {
      options.runs = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--warmup") == 0 && has_value) {
      options.warmup = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--device") == 0 && has_value) {
      options.device = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--seconds") == 0 && has_value) {
      options.seconds = std::atof(argv[++i]);
    } else if (std::strcmp(argv[i], "--no-flush") == 0) {
      options.flush = false;
    } else if (std::strcmp(argv[i], "--grad-e4m3") == 0) {
      options.grad_e4m3 = true;
    } else if (std::strcmp(argv[i], "--fast-accum-forward") == 0) {
      options.fast_accumulation_forward = true;
    } else {
      std::fprintf(stderr,
                   "usage: fp8_gemm_bench [--runs N] [--warmup N] [--device N] [--seconds S] "
                   "[--no-flush] [--grad-e4m3] [--fast-accum-forward]\n");
      return 2;
    }
  }
  if (options.runs < 1 || options.warmup < 1 || options.seconds < 0.0) {
    std::fprintf(stderr, "--runs and --warmup must be >= 1, --seconds >= 0\n");
    return 2;
  }
  const absl::Status status = fsdpd::Run(options);
  if (!status.ok()) {
    std::fprintf(stderr, "fp8_gemm_bench: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
