// What the worker tells the coordinator about its device when it registers.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace fsdpd {

struct DeviceInfo {
  std::string kind;   // cpu | cuda
  int gpu_index = 0;  // 0 for cpu, which has no index
  std::string gpu_name;
  std::string gpu_uuid;
  int64_t memory_bytes = 0;
};

// Parses --device ("cpu" or "cuda:N") and probes the device. For cpu the memory is the host's
// total RAM. For cuda:N (builds with the CUDA backend) it reports the GPU's name, UUID and
// memory; a build without CUDA refuses cuda devices with a clear error.
absl::StatusOr<DeviceInfo> ProbeDevice(const std::string& device);

}  // namespace fsdpd
