// DeviceProfiler over CUPTI (CUDA builds only): kernel times and launch attribution from the
// Activity API (CuptiActivityCollector), and per-kernel speed-of-light counters from the Range
// Profiler (auto range, kernel replay) during the window's counter step. Counters are left out,
// with the reason in counters_note(), when the host restricts them to administrators, when the
// chip refuses them, or in a world of more than one rank (kernel replay would replay NCCL
// kernels whose peers do not replay with them).
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "worker/profiler/device_profiler.h"

namespace fsdpd {

struct CudaDeviceProfilerOptions {
  int device_index = 0;
  int world_size = 1;
  // The analytic estimate's compute peak (the trainer's MFU baseline); its memory peak is the
  // device's HBM bandwidth.
  double peak_flops_per_second = 0.0;
  // False: never read counters (the estimate only).
  bool counters = true;
};

absl::StatusOr<std::unique_ptr<DeviceProfiler>> CreateCudaDeviceProfiler(
    const CudaDeviceProfilerOptions& options);

// The device's peak DRAM bandwidth in bytes/s: 2 transfers per memory clock × bus width.
absl::StatusOr<double> CudaPeakMemoryBandwidth(int device_index);

}  // namespace fsdpd
