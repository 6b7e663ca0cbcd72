// Speed-of-light counters per kernel from the CUPTI Range Profiler (CUDA builds only): auto
// range (one range per kernel, in launch order) with kernel replay (CUPTI replays each kernel
// as many passes as the metrics need, saving and restoring its memory), reading
//   sm__throughput.avg.pct_of_peak_sustained_elapsed → KernelStat.sm_throughput_ratio
//   gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed → memory_throughput_ratio
//   dram__throughput.avg.pct_of_peak_sustained_elapsed → dram_throughput_ratio
//   the tensor-pipe metrics the chip knows (options) → tensor_pipe_ratio
// Replay serialises and repeats kernels, so counters come from their own steps, never from the
// steps whose times the kernel table reports. Range i is the i-th kernel launched between Start
// and Stop: pair it with the activity records of the same steps by order.
//
// Counter access is often restricted to administrators (NVreg_RestrictProfilingToAdminUsers);
// then Create or Start fails with PERMISSION_DENIED and the caller falls back to the analytic
// roofline.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/profiler/counter_ratios.h"

namespace fsdpd {

struct CuptiRangeProfilerOptions {
  int device_index = 0;
  // Kernels one Start..Stop may profile; later ones are not measured.
  size_t max_kernels = 4096;
  // Tensor Core activity: every one of these the chip knows is read, and tensor_pipe is the
  // highest (Hopper's warpgroup GEMMs run on the gmma pipe, mma.sync on the hmma pipe); none
  // known: tensor_pipe is -1.
  std::vector<std::string> tensor_pipe_metrics = {
      "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
      "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
      "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"};
};

struct KernelCounters {
  std::string range_name;  // CUPTI's name for the range: the kernel's launch index
  CounterRatios ratios;    // fractions of peak, 0..1
};

class CuptiRangeProfiler {
 public:
  // Needs the context's device to be current on this thread.
  static absl::StatusOr<std::unique_ptr<CuptiRangeProfiler>> Create(
      CUcontext context, const CuptiRangeProfilerOptions& options);
  ~CuptiRangeProfiler();
  CuptiRangeProfiler(const CuptiRangeProfiler&) = delete;
  CuptiRangeProfiler& operator=(const CuptiRangeProfiler&) = delete;

  // The metrics read on this chip: the three base ones, then the tensor-pipe ones it knows.
  const std::vector<std::string>& metrics() const;

  absl::Status Start();
  // Ends the session, decodes the counters and returns one entry per profiled kernel, in launch
  // order. Call after the kernels have finished (synchronise the streams first).
  absl::StatusOr<std::vector<KernelCounters>> Stop();

 private:
  struct Handles;
  explicit CuptiRangeProfiler(std::unique_ptr<Handles> handles);
  std::unique_ptr<Handles> handles_;
};

}  // namespace fsdpd
