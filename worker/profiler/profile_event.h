// One timed thing in a profiling window: an op on a stream, a collective, or one of the
// worker's own host ranges (step, unit, phase).
#pragma once

#include <cstdint>
#include <string>

namespace fsdpd {

// Where an event is drawn in the trace: the host thread's ranges, or one of the two streams.
enum class ProfileLane { kHost = 0, kCompute = 1, kComm = 2 };

// KernelStat.phase values.
inline constexpr char kPhaseForward[] = "forward";
inline constexpr char kPhaseBackward[] = "backward";
inline constexpr char kPhaseOptimizer[] = "optimizer";
inline constexpr char kPhaseComm[] = "comm";

struct ProfileEvent {
  std::string name;   // "linear_forward", "all_gather", "step 21", "layers.3 forward"
  std::string unit;   // "layers.3", "root", or "" outside any unit (the optimizer)
  std::string phase;  // forward | backward | optimizer | comm, or "" outside any phase
  ProfileLane lane = ProfileLane::kCompute;
  double start_seconds = 0.0;  // on the steady clock, shared by the processes of a host
  double duration_seconds = 0.0;
  double flops = -1.0;  // < 0: unknown
  double bytes = -1.0;  // < 0: unknown
  std::string shapes;   // the inputs' dtypes and shapes, for the trace
  int64_t stream = -1;  // the device stream a kernel ran on (CUPTI's id); < 0: not a kernel
  std::string op;       // a kernel's launching op or collective; "" when unknown
};

}  // namespace fsdpd
