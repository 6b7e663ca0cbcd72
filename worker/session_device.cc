#include "worker/session_device.h"

#include "absl/strings/str_cat.h"
#include "worker/device/device_runtime.h"

namespace fsdpd {

absl::StatusOr<DeviceInfo> ProbeDevice(const DeviceRuntime& runtime) {
  absl::StatusOr<DeviceInfo> info = runtime.Describe();
  if (!info.ok()) {
    return absl::Status(info.status().code(),
                        absl::StrCat("--device ", runtime.device(), ": ", info.status().message()));
  }
  return info;
}

}  // namespace fsdpd
