// Speed-of-light ratios of one kernel launch read from hardware counters, as fractions of peak
// (0..1; -1 where unknown). Shared by the CUPTI range profiler and the kernel table.
#pragma once

namespace fsdpd {

struct CounterRatios {
  double sm = -1.0;
  double memory = -1.0;  // gpu__compute_memory_throughput
  double dram = -1.0;
  double tensor_pipe = -1.0;
};

}  // namespace fsdpd
