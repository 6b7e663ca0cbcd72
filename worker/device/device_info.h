// What the worker tells the coordinator about its device when it registers
// (DeviceRuntime::Describe); kept apart so the session needs no engine header.
#pragma once

#include <cstdint>
#include <string>

namespace fsdpd {

struct DeviceInfo {
  std::string kind;   // cpu | cuda
  int gpu_index = 0;  // 0 for cpu, which has no index
  std::string gpu_name;
  std::string gpu_uuid;
  int64_t memory_bytes = 0;
  int compute_capability = 0;  // cuda: major · 10 + minor (90 for sm_90); cpu: 0
};

}  // namespace fsdpd
