// Device kernel timings from the CUPTI Activity API (CUDA builds only): every kernel that runs
// while the collector is started, as CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL records, with its
// demangled name, stream, device start and end. The kernels are attributed to the FSDP unit and
// phase through external correlation ids: PushScope(id) around the host code that launches them
// (ProfileRange's scopes), so each record carries the id that was current at its launch.
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

namespace fsdpd {

struct DeviceKernelRecord {
  std::string name;  // demangled
  uint32_t device_id = 0;
  uint32_t stream_id = 0;
  uint32_t correlation_id = 0;
  uint64_t external_id = 0;  // the scope pushed at launch; 0: none
  // On the host's steady clock (ProfileRecorder::Now()), so they line up with host ranges.
  double start_seconds = 0.0;
  double duration_seconds = 0.0;
};

class CuptiActivityCollector {
 public:
  // The process's collector; registers CUPTI's buffer callbacks on first use.
  static absl::StatusOr<CuptiActivityCollector*> Get();

  // Enables kernel and external-correlation records; drops what an earlier window left.
  absl::Status Start();
  // Disables them, flushes every buffer and returns the window's kernels in start order.
  absl::StatusOr<std::vector<DeviceKernelRecord>> Stop();

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
