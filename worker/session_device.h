// What the worker tells the coordinator about its device when it registers: the description of
// the device runtime it chose once from --device (worker/device/device_runtime.h).
#pragma once

#include "absl/status/statusor.h"
#include "worker/device/device_info.h"

namespace fsdpd {

class DeviceRuntime;

// For cpu the memory this process may use (the host's RAM or its cgroup's limit); for cuda:N
// the GPU's name, UUID and free memory.
// Errors name --device.
absl::StatusOr<DeviceInfo> ProbeDevice(const DeviceRuntime& runtime);

}  // namespace fsdpd
