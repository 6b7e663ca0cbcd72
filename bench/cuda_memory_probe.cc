// Where the device memory outside the caching allocator goes: the driver's used bytes
// (cudaMemGetInfo) after each thing a CUDA worker sets up, on the seed's shapes (T=8192 tokens,
// D=2048, H=16, F=8192, V=32000). Each stage's tensors are freed into the allocator's cache, so
// "outside" = driver used − the allocator's reserved bytes. Usage: cuda_memory_probe
// [--device N] [--cupti]; the last stage creates an NCCL communicator of one rank, then the host
// time of the step report's memory queries is printed. Run it alone on the device:
// cudaMemGetInfo counts every process.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "bench/seed_device_tensors.h"
#include "worker/backend/cuda_backend.h"
#include "worker/comm/nccl_communicator.h"
#include "worker/device/cuda_memory.h"
#include "worker/profiler/cuda_device_profiler.h"
#include "worker/profiler/profile_recorder.h"

namespace fsdpd {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

int64_t DriverUsed() {
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
    std::fprintf(stderr, "cudaMemGetInfo failed\n");
    std::exit(1);
  }
  return static_cast<int64_t>(total_bytes - free_bytes);
}

class Probe {
 public:
  Probe() {
    std::printf("%-46s %12s %12s %12s %12s\n", "after", "driver MiB", "+ MiB", "alloc MiB",
                "outside MiB");
  }

  void Report(const char* stage, const Backend* backend) {
    const int64_t used = DriverUsed();
    const int64_t reserved = backend != nullptr ? backend->memory_stats().reserved_bytes : 0;
    std::printf("%-46s %12.1f %12.1f %12.1f %12.1f\n", stage, used / kMiB, (used - last_) / kMiB,
                reserved / kMiB, (used - reserved) / kMiB);
    std::fflush(stdout);
    last_ = used;
  }

 private:
  int64_t last_ = 0;
};

// What reading the device memory costs the host: a step report asks NVML for this process's
// bytes and the driver for the device's, between two steps, while the GPU waits.
void TimeMemoryQueries(int device) {
  auto median_microseconds = [](const std::function<void()>& query) {
    std::vector<double> times;
    for (int i = 0; i < 21; ++i) {
      const auto start = std::chrono::steady_clock::now();
      query();
      times.push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
              .count());
    }
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
  };
  std::string source;
  const double process = median_microseconds([&] {
    absl::StatusOr<MemoryInUse> used = DeviceMemoryInUse(device);
    source = used.ok() ? used->source : std::string(used.status().message());
  });
  const double driver = median_microseconds([&] { (void)QueryDriverMemory(device); });
  std::printf(
      "host time a query, median of 21: process memory (%s) %.1f us, driver memory %.1f us\n",
      source.c_str(), process, driver);
}

int Main(int device, bool cupti) {
  ExitOnError(cudaSetDevice(device) == cudaSuccess ? absl::OkStatus()
                                                   : absl::InternalError("cudaSetDevice"),
              "device");
  Probe probe;  // cudaSetDevice and cudaMemGetInfo create the context: the first stage
  probe.Report("CUDA context (cudaFree(0))", nullptr);
  CudaBackendConfig config;
  config.device = device;
  auto created = CudaBackend::Create(config);
  ExitOnError(created.status(), "backend");
  CudaBackend& backend = **created;
  probe.Report("backend: streams, allocator, cuBLASLt handle", &backend);
  Ops& ops = backend.ops();
  Stream& stream = backend.compute_stream();
  {
    DeviceTensors t(&backend);
    Tensor x = t.New(DType::kBF16, {kTokens, kDim});
    Tensor w = t.New(DType::kBF16, {kHidden, kDim});
    Tensor y = t.New(DType::kBF16, {kTokens, kHidden});
    Tensor dx = t.New(DType::kBF16, {kTokens, kDim});
    Tensor dw = t.New(DType::kF32, {kHidden, kDim}, 0.0f);
    Tensor db = t.New(DType::kF32, {kHidden}, 0.0f);
    ExitOnError(ops.LinearForward(x, w, Tensor{}, y, stream), "linear");
    ExitOnError(ops.LinearBackward(y, x, w, dx, dw, Tensor{}, Write::kOverwrite, stream),
                "linear backward");
    Tensor bias = t.New(DType::kBF16, {kHidden});
    ExitOnError(ops.LinearForward(x, w, bias, y, stream), "linear with bias");
    ExitOnError(ops.LinearBackward(y, x, w, dx, dw, db, Write::kOverwrite, stream),
                "linear backward with bias");
    ExitOnError(stream.Synchronize(), "sync");
  }
  probe.Report("GEMMs forward and backward (cuBLASLt)", &backend);
  {
    DeviceTensors t(&backend);
    Tensor qkv = t.New(DType::kBF16, {kBatch, kSeq, 3 * kDim});
    Tensor out = t.New(DType::kBF16, {kBatch, kSeq, kDim});
    Tensor lse = t.New(DType::kF32, {kBatch, kHeads, kSeq});
    Tensor dout = t.New(DType::kBF16, {kBatch, kSeq, kDim});
    Tensor dqkv = t.New(DType::kBF16, {kBatch, kSeq, 3 * kDim});
    for (const bool causal : {false, true}) {
      ExitOnError(ops.AttentionForward(qkv, kHeads, kHeads, causal, out, lse, stream), "attention");
      ExitOnError(ops.AttentionBackward(dout, qkv, out, lse, kHeads, kHeads, causal, dqkv, stream),
                  "attention backward");
    }
    ExitOnError(stream.Synchronize(), "sync");
  }
  probe.Report("attention forward and backward, both masks", &backend);
  {
    DeviceTensors t(&backend);
    Tensor x = t.New(DType::kBF16, {kTokens, kDim});
    Tensor head = t.New(DType::kBF16, {kVocab, kDim});
    Tensor targets = t.New(DType::kI32, {kTokens});
    ExitOnError(cudaMemsetAsync(targets.data, 0, targets.bytes(), nullptr) == cudaSuccess
                    ? absl::OkStatus()
                    : absl::InternalError("memset"),
                "targets");
    Tensor loss = t.New(DType::kF32, {1});
    Tensor dx = t.New(DType::kBF16, {kTokens, kDim});
    Tensor dhead = t.New(DType::kF32, {kVocab, kDim}, 0.0f);
    Tensor weight = t.New(DType::kBF16, {kDim}, 1.0f);
    Tensor rstd = t.New(DType::kF32, {kTokens});
    Tensor dweight = t.New(DType::kF32, {kDim}, 0.0f);
    ExitOnError(
        cudaDeviceSynchronize() == cudaSuccess ? absl::OkStatus() : absl::InternalError("sync"),
        "sync");
    ExitOnError(ops.HeadCrossEntropy(x, head, targets, 1.0, loss, dx, dhead, stream), "head");
    ExitOnError(ops.RmsNormForward(x, weight, 1e-6, dx, rstd, Tensor{}, stream), "rmsnorm");
    Tensor dout = t.New(DType::kBF16, {kTokens, kDim});
    ExitOnError(ops.RmsNormBackward(dout, x, weight, rstd, dx, Write::kOverwrite, dweight,
                                    Write::kOverwrite, Tensor{}, stream),
                "rmsnorm backward");
    ExitOnError(ops.SiluForward(x, dx, Tensor{}, stream), "silu");
    Tensor master = t.New(DType::kF32, {kDim * kDim});
    Tensor grad = t.New(DType::kF32, {kDim * kDim});
    Tensor m = t.New(DType::kF32, {kDim * kDim}, 0.0f);
    Tensor v = t.New(DType::kF32, {kDim * kDim}, 0.0f);
    ExitOnError(ops.AdamW(master, grad, m, v, AdamWParams{}, stream), "adamw");
    ExitOnError(stream.Synchronize(), "sync");
  }
  probe.Report("head, norms, SiLU, AdamW (own kernels)", &backend);
  if (cupti) {
    // As a worker with a profiling hook does at start, then one activity-only window.
    CudaDeviceProfilerOptions options;
    options.device_index = device;
    options.peak_flops_per_second = 989e12;
    auto profiler = CreateCudaDeviceProfiler(options);
    ExitOnError(profiler.status(), "CUPTI device profiler");
    probe.Report("CUPTI device profiler created", &backend);
    ExitOnError((*profiler)->BeginWindow(), "window");
    {
      DeviceTensors t(&backend);
      Tensor x = t.New(DType::kBF16, {kTokens, kDim});
      Tensor y = t.New(DType::kBF16, {kTokens, kDim});
      ExitOnError(ops.Add(x, x, y, stream), "add");
      ExitOnError(stream.Synchronize(), "sync");
    }
    probe.Report("CUPTI activity window open", &backend);
    ProfileRecorder recorder;
    ExitOnError((*profiler)->EndWindow(&recorder).status(), "window end");
    probe.Report("CUPTI activity window closed", &backend);
  }
  {
    // What a one-rank job no longer creates (worker/comm/local_communicator.h).
    NcclCommunicatorOptions options;
    options.device = device;
    auto nccl = NcclCommunicator::Connect(options, nullptr);
    ExitOnError(nccl.status(), "NCCL");
    DeviceTensors t(&backend);
    Tensor values = t.New(DType::kF32, {1 << 20});
    ExitOnError((*nccl)->AllReduce(values, ReduceOp::kSum, stream), "NCCL all-reduce");
    ExitOnError(stream.Synchronize(), "sync");
    probe.Report("NCCL communicator of one rank, one all-reduce", &backend);
  }
  TimeMemoryQueries(device);
  return 0;
}

}  // namespace
}  // namespace fsdpd

int main(int argc, char** argv) {
  int device = 0;
  bool cupti = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--device") == 0 && i + 1 < argc) {
      device = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--cupti") == 0) {
      cupti = true;
    } else {
      std::fprintf(stderr, "usage: cuda_memory_probe [--device N] [--cupti]\n");
      return 2;
    }
  }
  return fsdpd::Main(device, cupti);
}
