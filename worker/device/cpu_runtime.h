// The CPU runtime (--device cpu): the fp32 CPU backend, Gloo collectives, the BLAS rate it
// measures as the MFU peak, and the process's resident set size. Built in every configuration.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "worker/device/device_runtime.h"

namespace fsdpd {

class CpuRuntime : public DeviceRuntime {
 public:
  std::string device() const override { return "cpu"; }
  std::string kind() const override { return "cpu"; }
  // The memory this process may use: the host's RAM, or its memory cgroup's limit when lower
  // (cgroup_memory.h).
  absl::StatusOr<DeviceInfo> Describe() const override;
  absl::StatusOr<std::unique_ptr<Backend>> CreateBackend() const override;
  absl::StatusOr<std::unique_ptr<Communicator>> CreateCommunicator(
      const CommunicatorOptions& options, KeyValueStore* store) const override;
  absl::StatusOr<double> PeakFlops(Backend& backend) const override;
  // The resident set size from /proc/self/statm.
  MemoryInUse ProcessMemory() const override;
  std::optional<DriverMemory> DeviceMemory() const override { return std::nullopt; }
  // Host timers time the CPU's ops exactly: no device profiler.
  std::unique_ptr<DeviceProfiler> CreateDeviceProfiler(int world_size, double peak_flops_per_second,
                                                       const DeviceLog& log) const override {
    return nullptr;
  }
  // The CPU's waits block the host, where the communicator times them: no timer.
  std::unique_ptr<StreamWaitTimer> CreateStreamWaitTimer(Backend& backend) const override {
    return nullptr;
  }
};

// The FLOP/s that MFU is measured against, per rank, from the backend itself. FSDPD_PEAK_FLOPS
// (a number, FLOP/s) sets it; otherwise it is measured once: the best of a few 512×512×512
// matrix products through the backend's own LinearForward, i.e. what this rank achieves.
absl::StatusOr<double> MeasuredPeakFlops(Backend& backend);

}  // namespace fsdpd
