// Memory on a CUDA device as its driver sees it, for the CUDA runtime (cuda_runtime.h). Only
// built with FSDPD_CUDA.
#pragma once

#include "absl/status/statusor.h"
#include "worker/device/device_runtime.h"

namespace fsdpd {

// This process's memory on device `index` for StepReport: NVML's per-process figure when
// libnvidia-ml.so.1 loads and lists this process (not inside a PID namespace it cannot see),
// else the device's total − free from cudaMemGetInfo.
absl::StatusOr<MemoryInUse> DeviceMemoryInUse(int index);

// cudaMemGetInfo on `index`: total − free (every process on the device) and total.
absl::StatusOr<DriverMemory> QueryDriverMemory(int index);

}  // namespace fsdpd
