// The device a worker runs on, chosen once from --device (cpu, cuda:N) by CreateDeviceRuntime:
// everything that differs between the CPU and a GPU — the backend, the communicator, the peak
// FLOP/s MFU is measured against, memory as the driver sees it, device-side profiling — is asked
// of this interface, so the trainer, the session and the profiler never test which build or
// device they run on. CpuRuntime (cpu_runtime.h) and CudaRuntime (cuda_runtime.h, CUDA builds
// only) implement it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/backend/backend.h"
#include "worker/comm/communicator.h"
#include "worker/comm/key_value_store.h"
#include "worker/device/device_info.h"
#include "worker/profiler/device_profiler.h"
#include "worker/profiler/profiling_backend.h"

namespace fsdpd {

// Memory as the driver or the OS sees this process (StepReport.memory_device_used_*).
struct MemoryInUse {
  int64_t bytes = 0;  // 0: unknown
  std::string source;
};

// The whole device as its driver sees it, every process included.
struct DriverMemory {
  int64_t used_bytes = 0;
  int64_t total_bytes = 0;
};

// (level, text): how the runtime reports a fallback, e.g. CUPTI being unavailable.
using DeviceLog = std::function<void(const std::string& level, const std::string& text)>;

class DeviceRuntime {
 public:
  virtual ~DeviceRuntime() = default;

  // The --device string it was chosen from: "cpu" or "cuda:N".
  virtual std::string device() const = 0;
  // The parallel.device of the jobs it runs: "cpu" or "cuda".
  virtual std::string kind() const = 0;
  // For the worker's registration.
  virtual absl::StatusOr<DeviceInfo> Describe() const = 0;

  // A fresh backend for one attempt (allocator, streams, ops).
  virtual absl::StatusOr<std::unique_ptr<Backend>> CreateBackend() const = 0;
  // The collectives for one attempt over `store` (already scoped to the job and attempt): Gloo
  // (or the in-process world of one) on the CPU, NCCL on a GPU.
  virtual absl::StatusOr<std::unique_ptr<Communicator>> CreateCommunicator(
      const CommunicatorOptions& options, KeyValueStore* store) const = 0;

  // The FLOP/s per rank that MFU is measured against. FSDPD_PEAK_FLOPS (FLOP/s) overrides it;
  // otherwise a GPU's dense bf16 tensor-core peak, or the rate `backend` measures (the CPU).
  virtual absl::StatusOr<double> PeakFlops(Backend& backend) const = 0;

  // This process's memory as the driver or the OS sees it, read every step. Never fails: an
  // unknown figure is 0 with an empty source.
  virtual MemoryInUse ProcessMemory() const = 0;
  // The device's used and total memory per its driver, logged beside the allocator's peak
  // (which leaves out the CUDA context, cuBLASLt and NCCL); nullopt where there is no such view.
  virtual std::optional<DriverMemory> DeviceMemory() const = 0;

  // Device-side timing and counters for profiling windows; null: windows use host timers.
  // `log` hears why when the device could profile but cannot now.
  virtual std::unique_ptr<DeviceProfiler> CreateDeviceProfiler(int world_size,
                                                               double peak_flops_per_second,
                                                               const DeviceLog& log) const = 0;
  // Times the compute stream's waits on comm-stream events on the device (exposed
  // communication); null where waits block the host, which the communicator already times.
  virtual std::unique_ptr<StreamWaitTimer> CreateStreamWaitTimer(Backend& backend) const = 0;
};

// The one place the device is chosen. "cpu" gives the CPU runtime; "cuda:N" gives the CUDA
// runtime on device N — NOT_FOUND when no such device is visible, and UNIMPLEMENTED ("this
// fsdpd-worker was built without CUDA") in a build without the CUDA backend. Errors name
// --device.
absl::StatusOr<std::unique_ptr<DeviceRuntime>> CreateDeviceRuntime(const std::string& device);

// Whether a job of parallel.device `job_device` (cpu, cuda) runs on a worker started with
// --device `worker_device`: UNIMPLEMENTED otherwise (another worker may run it), naming both and
// what this build runs.
absl::Status CheckDevice(const std::string& job_device, const std::string& worker_device);

}  // namespace fsdpd
