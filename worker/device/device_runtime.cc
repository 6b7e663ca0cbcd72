// CreateDeviceRuntime: the only place outside the CUDA-only files that knows whether this build
// has the CUDA backend.
#include "worker/device/device_runtime.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "worker/device/cpu_runtime.h"
#ifdef FSDPD_HAS_CUDA
#include "worker/device/cuda_runtime.h"
#endif

namespace fsdpd {
namespace {

#ifdef FSDPD_HAS_CUDA
constexpr bool kBuiltWithCuda = true;
#else
constexpr bool kBuiltWithCuda = false;
#endif

// "cuda:N" → N; an error naming --device otherwise.
absl::StatusOr<int> CudaIndex(const std::string& device) {
  int index = -1;
  if (!absl::SimpleAtoi(device.substr(5), &index) || index < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--device: \"", device, "\" has no valid GPU index (expected cuda:N)"));
  }
  return index;
}

absl::StatusOr<std::unique_ptr<DeviceRuntime>> CreateCudaRuntimeFor(const std::string& device,
                                                                    int index) {
#ifdef FSDPD_HAS_CUDA
  absl::StatusOr<std::unique_ptr<DeviceRuntime>> runtime = CreateCudaRuntime(index);
  if (!runtime.ok()) {
    return absl::Status(runtime.status().code(),
                        absl::StrCat("--device ", device, ": ", runtime.status().message()));
  }
  return runtime;
#else
  return absl::UnimplementedError(
      absl::StrCat("--device ", device,
                   ": this fsdpd-worker was built without CUDA; rebuild with -DFSDPD_CUDA=ON or "
                   "use --device cpu"));
#endif
}

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceRuntime>> CreateDeviceRuntime(const std::string& device) {
  if (device == "cpu") return std::unique_ptr<DeviceRuntime>(new CpuRuntime());
  if (absl::StartsWith(device, "cuda:")) {
    absl::StatusOr<int> index = CudaIndex(device);
    if (!index.ok()) return index.status();
    return CreateCudaRuntimeFor(device, *index);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--device: unknown device \"", device, "\" (expected cpu or cuda:N)"));
}

absl::Status CheckDevice(const std::string& job_device, const std::string& worker_device) {
  if (job_device == "cpu" && worker_device == "cpu") return absl::OkStatus();
  if (kBuiltWithCuda && job_device == "cuda" && absl::StartsWith(worker_device, "cuda:") &&
      CudaIndex(worker_device).ok()) {
    return absl::OkStatus();
  }
  const char* supported =
      kBuiltWithCuda
          ? "device: cpu on a cpu worker, or device: cuda on a cuda:N worker"
          : "device: cpu only (this build has no CUDA backend; rebuild with -DFSDPD_CUDA=ON)";
  // UNIMPLEMENTED: this worker cannot run such a job, though another worker may.
  return absl::UnimplementedError(absl::StrCat("parallel.device '", job_device,
                                               "' cannot run on worker device '", worker_device,
                                               "': this engine runs ", supported));
}

}  // namespace fsdpd
