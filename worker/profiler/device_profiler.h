// The device side of a profiling window on an asynchronous backend (CUDA): kernel times from
// the device's activity records, attributed to the launch sites the recorder opened (so each
// kernel has its FSDP unit and phase), and speed-of-light counters per kernel from one
// replayed step. The interface keeps CUDA out of the trainer and the window; the CUDA build
// implements it with CUPTI (cuda_device_profiler.h). AttributeDeviceKernels, the pure part, is
// tested on any machine.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/profiler/counter_ratios.h"
#include "worker/profiler/profile_recorder.h"
#include "worker/profiler/roofline.h"

namespace fsdpd {

// One kernel execution as the device recorded it.
struct DeviceKernelRecord {
  std::string name;          // demangled
  std::string mangled_name;  // as launched
  uint32_t device_id = 0;
  uint32_t stream_id = 0;
  uint32_t correlation_id = 0;  // of the API call that launched it
  uint64_t external_id = 0;     // the launch site tagged at launch; 0: none
  // On the host's steady clock (ProfileRecorder::Now()), so they line up with host ranges.
  double start_seconds = 0.0;
  double duration_seconds = 0.0;
};

// What the device gave for one window.
struct DeviceWindowRecords {
  std::vector<DeviceKernelRecord> kernels;
  // Correlation id → when the launching API call began (steady clock); attributes kernels
  // whose tag was lost by the launch time instead.
  std::unordered_map<uint32_t, double> launch_seconds;
  // Kernels that started before this are the counter step's: they carry counters, not times.
  double counter_step_end_seconds = -std::numeric_limits<double>::infinity();
  // The counter step's readings, one per kernel in launch order.
  std::vector<CounterRatios> counters;
};

struct AttributionSummary {
  int64_t timed_kernels = 0;
  int64_t by_tag = 0;            // through the site id carried by the launch
  int64_t by_launch_time = 0;    // through the launching call's time
  int64_t unattributed = 0;      // neither: no unit, no phase
  int64_t counter_kernels = 0;   // kernels of the counter step
  int64_t counter_readings = 0;  // readings paired with them
};

// Adds the timed kernels to `recorder`'s table and trace (name, unit and phase of the innermost
// launch site; lane of their stream; the launching op's analytic cost shared out by kernel
// time), and the counter step's readings, paired in launch order.
AttributionSummary AttributeDeviceKernels(const DeviceWindowRecords& records,
                                          ProfileRecorder* recorder);

class DeviceProfiler : public LaunchTagger {
 public:
  // A window begins: collect the device's kernel records from now on.
  virtual absl::Status BeginWindow() = 0;
  // Around the one step whose kernels are replayed for counters (the window's first, when it
  // has more than one step); its kernel times are left out of the table.
  virtual absl::Status BeginCounterStep() = 0;
  virtual absl::Status EndCounterStep() = 0;
  // Waits for the device, attributes the window's kernels to the recorder's launch sites and
  // adds them (and the counters) to its table and trace.
  virtual absl::StatusOr<AttributionSummary> EndWindow(ProfileRecorder* recorder) = 0;
  // The roofline's peaks for the analytic estimate where counters are missing.
  virtual RooflinePeaks peaks() const = 0;
  // Whether this device can read counters at all; when not, why (shown in the trace).
  virtual bool counters_available() const = 0;
  virtual std::string counters_note() const = 0;
};

}  // namespace fsdpd
