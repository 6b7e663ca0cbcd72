// Device kernel timings from the CUPTI Activity API (CUDA builds only): every kernel that runs
// while the collector is started, as CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL records, with its
// demangled name, stream, device start and end. The kernels are attributed to the FSDP unit and
// phase through external correlation ids: PushScope(id) around the host code that launches them
// (the recorder's launch sites), so each record carries the id that was current at its launch.
// The launching API calls are recorded too, so a kernel whose id went missing can still be
// attributed by the time of its launch. CUPTI takes its timestamps from the steady clock, the
// recorder's.
//
// CUPTI delivers activity buffers through process-wide callbacks, so there is one collector per
// process (one worker process per GPU).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/profiler/device_profiler.h"

namespace fsdpd {

class CuptiActivityCollector {
 public:
  // The process's collector; registers CUPTI's buffer callbacks on first use.
  static absl::StatusOr<CuptiActivityCollector*> Get();

  // Enables kernel and external-correlation records; drops what an earlier window left.
  absl::Status Start();
  // Disables them, flushes every buffer and returns the window's kernels in start order, with
  // the launch times of their API calls. Call after the device has finished the window's work.
  absl::StatusOr<DeviceWindowRecords> Stop();

  // Tags the kernels launched from this thread until the matching PopScope with `id` (> 0).
  static absl::Status PushScope(uint64_t id);
  static absl::Status PopScope();

  // Records CUPTI could not deliver since Start (its buffers were full).
  int64_t dropped_records() const;

 private:
  CuptiActivityCollector() = default;
};

// "void foo<int>(float*)" from "_Z3fooIiEvPf"; a name that is not mangled comes back unchanged.
std::string DemangleKernelName(const char* name);

}  // namespace fsdpd
