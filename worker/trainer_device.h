// The CUDA side of the engine: the backend and communicator for `device: cuda` jobs on a worker
// started with --device cuda:N, and the device's memory as the driver sees it. Only built with
// FSDPD_CUDA (worker/nccl.cmake); callers guard their use with FSDPD_HAS_CUDA, so the CPU-only
// build never sees a CUDA header.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/backend/backend.h"
#include "worker/comm/communicator.h"
#include "worker/comm/key_value_store.h"
#include "worker/profiler/device_profiler.h"
#include "worker/trainer_support.h"

namespace fsdpd {

// "cuda:N" → N; an error naming the string otherwise.
absl::StatusOr<int> ParseCudaDevice(const std::string& device);

// The CUDA backend on device `index` (bf16 activations, caching allocator, compute and comm
// streams).
absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int index);

// NCCL over the rendezvous store (rank 0 publishes the unique id); also for a world of one, where
// it needs no store, so that collectives on device memory always go through NCCL.
absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(
    const CommunicatorOptions& options, int device, KeyValueStore* store);

// Profiling windows on `device` (cuda:N): kernels timed by CUPTI, counters in a world of one.
// Null after a warning through `log` (level, text) when CUPTI cannot be used; windows then
// fall back to host timers.
std::unique_ptr<DeviceProfiler> DeviceProfilerFor(
    const std::string& device, int world_size, double peak_flops_per_second,
    const std::function<void(const std::string&, const std::string&)>& log);

// This process's memory on device `index` for StepReport: NVML's per-process figure when
// libnvidia-ml.so.1 loads and lists this process (not inside a PID namespace it cannot see),
// else the device's total − free from cudaMemGetInfo.
absl::StatusOr<MemoryInUse> DeviceMemoryInUse(int index);

struct DriverMemory {
  int64_t used_bytes = 0;  // total − free, every process on the device included
  int64_t total_bytes = 0;
};
// cudaMemGetInfo on `index`.
absl::StatusOr<DriverMemory> QueryDriverMemory(int index);

// The device's dense bf16 tensor-core peak in FLOP/s (SMs × peak clock × FLOPs per SM per
// clock: 2048 on sm_80, 4096 on sm_90, 8192 on sm_100), the figure MFU is measured against;
// 0 for an architecture this table does not know.
absl::StatusOr<double> CudaPeakBf16Flops(int index);

struct CudaDeviceDescription {
  std::string name;
  std::string uuid;  // "GPU-xxxxxxxx-…", as nvidia-smi and dcgm-exporter print it
  int64_t memory_bytes = 0;
};
// For the worker's registration: NOT_FOUND when the device does not exist.
absl::StatusOr<CudaDeviceDescription> DescribeCudaDevice(int index);

}  // namespace fsdpd
