// The CUDA runtime (--device cuda:N; only built with FSDPD_CUDA): the bf16 CUDA backend, NCCL
// collectives, the GPU's tensor-core peak as the MFU baseline, memory per NVML or the driver,
// CUPTI profiling and CUDA-event stream-wait timing. CreateDeviceRuntime (device_runtime.h) is
// its only caller outside the CUDA-only files.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "worker/device/background_reading.h"
#include "worker/device/device_runtime.h"

namespace fsdpd {

class CudaRuntime : public DeviceRuntime {
 public:
  explicit CudaRuntime(int index);

  std::string device() const override { return "cuda:" + std::to_string(index_); }
  std::string kind() const override { return "cuda"; }
  // The GPU's name, UUID and the memory free on it now (what a job may use).
  absl::StatusOr<DeviceInfo> Describe() const override;
  // The CUDA backend on this device (bf16 activations, caching allocator, compute and comm
  // streams).
  absl::StatusOr<std::unique_ptr<Backend>> CreateBackend() const override;
  // NCCL over the rendezvous store (rank 0 publishes the unique id); also for a world of one,
  // where it needs no store, so that collectives on device memory always go through NCCL.
  absl::StatusOr<std::unique_ptr<Communicator>> CreateCommunicator(
      const CommunicatorOptions& options, KeyValueStore* store) const override;
  // The dense bf16 tensor-core peak (CudaPeakBf16Flops) unless FSDPD_PEAK_FLOPS is set or the
  // architecture is unknown; then MeasuredPeakFlops.
  absl::StatusOr<double> PeakFlops(Backend& backend) const override;
  // NVML's figure (or the driver's), read on a thread of its own: each call returns the reading
  // taken since the call before (background_reading.h), the first one read inline.
  MemoryInUse ProcessMemory() const override;
  std::optional<DriverMemory> DeviceMemory() const override;
  // Kernels timed by CUPTI, counters in a world of one. Null after a warning through `log`
  // when CUPTI cannot be used; windows then fall back to host timers.
  std::unique_ptr<DeviceProfiler> CreateDeviceProfiler(int world_size, double peak_flops_per_second,
                                                       const DeviceLog& log) const override;
  std::unique_ptr<StreamWaitTimer> CreateStreamWaitTimer(Backend& backend) const override;

 private:
  int index_;
  std::unique_ptr<BackgroundReading<MemoryInUse>> process_memory_;
};

// The runtime on device `index`: NOT_FOUND when the device does not exist (naming how many are
// visible).
absl::StatusOr<std::unique_ptr<DeviceRuntime>> CreateCudaRuntime(int index);

// The device's dense bf16 tensor-core peak in FLOP/s (SMs × peak clock × FLOPs per SM per
// clock: 2048 on sm_80, 4096 on sm_90, 8192 on sm_100), the figure MFU is measured against;
// 0 for an architecture this table does not know.
absl::StatusOr<double> CudaPeakBf16Flops(int index);

}  // namespace fsdpd
