// Aggregates a window's events into the kernel table, like torch.profiler's key_averages():
// one row per (name, unit, phase) with calls, total time and share of all op time, sorted by
// total time, then the roofline pass. Host ranges are not ops and are left out.
#pragma once

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "fsdpd/v1/profile.pb.h"
#include "worker/profiler/counter_ratios.h"
#include "worker/profiler/profile_event.h"
#include "worker/profiler/roofline.h"

namespace fsdpd {

class KernelTableBuilder {
 public:
  void Add(const ProfileEvent& event);
  // Counter readings for one launch of `event`'s kernel (its name, unit, phase, duration), from
  // a replayed profiling pass. Rows with readings report their duration-weighted mean with
  // source "cupti" instead of the analytic estimate.
  void AddCounters(const ProfileEvent& event, const CounterRatios& ratios);
  void Clear() { rows_.clear(); }
  bool empty() const { return rows_.empty(); }

  // Rows by total time, longest first (ties by name, unit, phase). percent_of_total is of the
  // sum over all rows, so the column adds up to 100. With `peaks`, the analytic roofline fills
  // the throughput ratios and verdicts; without, rows carry timings only (source host-timer).
  std::vector<v1::KernelStat> Build(const RooflinePeaks* peaks) const;

 private:
  struct Totals {
    int64_t calls = 0;
    double seconds = 0.0;
    double flops = 0.0;
    double bytes = 0.0;
    // Every call had a known count; a collective knows its bytes but not its FLOPs.
    bool flops_known = true;
    bool bytes_known = true;
    // Duration-weighted sums of counter readings, and the durations they cover.
    CounterRatios weighted_sums{0.0, 0.0, 0.0, 0.0};
    CounterRatios weights{0.0, 0.0, 0.0, 0.0};
  };
  std::map<std::tuple<std::string, std::string, std::string>, Totals> rows_;
};

}  // namespace fsdpd
