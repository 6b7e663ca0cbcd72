#include "worker/session_device.h"

#include <unistd.h>

#include <cctype>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#ifdef FSDPD_HAS_CUDA
#include "worker/trainer_device.h"
#endif

namespace fsdpd {
namespace {

int64_t HostMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0) return 0;
  return static_cast<int64_t>(pages) * static_cast<int64_t>(page_size);
}

}  // namespace

absl::StatusOr<DeviceInfo> ProbeDevice(const std::string& device) {
  if (device == "cpu") {
    DeviceInfo info;
    info.kind = "cpu";
    info.memory_bytes = HostMemoryBytes();
    return info;
  }
  if (absl::StartsWith(device, "cuda:")) {
    int index = -1;
    if (!absl::SimpleAtoi(device.substr(5), &index) || index < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--device: \"", device, "\" has no valid GPU index (expected cuda:N)"));
    }
#ifdef FSDPD_HAS_CUDA
    absl::StatusOr<CudaDeviceDescription> gpu = DescribeCudaDevice(index);
    if (!gpu.ok()) {
      return absl::Status(gpu.status().code(),
                          absl::StrCat("--device ", device, ": ", gpu.status().message()));
    }
    DeviceInfo info;
    info.kind = "cuda";
    info.gpu_index = index;
    info.gpu_name = gpu->name;
    info.gpu_uuid = gpu->uuid;
    info.memory_bytes = gpu->memory_bytes;
    return info;
#else
    return absl::UnimplementedError(
        absl::StrCat("--device ", device,
                     ": this fsdpd-worker was built without the CUDA backend; use --device cpu"));
#endif
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--device: unknown device \"", device, "\" (expected cpu or cuda:N)"));
}

}  // namespace fsdpd
