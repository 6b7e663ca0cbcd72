#include "worker/profiler/device_profiler.h"

#include <algorithm>
#include <set>
#include <string>
#include <tuple>
#include <unordered_set>

namespace fsdpd {
namespace {

// The innermost site open at `seconds`: sites open in time order and nest, so it is the
// latest-opened one that had not closed yet. 0 when none.
uint64_t SiteOpenAt(const std::vector<LaunchSite>& sites, double seconds) {
  auto after = std::upper_bound(
      sites.begin(), sites.end(), seconds,
      [](double time, const LaunchSite& site) { return time < site.start_seconds; });
  for (auto it = after; it != sites.begin();) {
    --it;
    const bool open = it->end_seconds < it->start_seconds;  // never closed: still open
    if (open || it->end_seconds >= seconds) return static_cast<uint64_t>(it - sites.begin()) + 1;
  }
  return 0;
}

struct Attributed {
  const DeviceKernelRecord* kernel = nullptr;
  uint64_t site = 0;
};

}  // namespace

AttributionSummary AttributeDeviceKernels(const DeviceWindowRecords& records,
                                          ProfileRecorder* recorder) {
  AttributionSummary summary;
  const std::vector<LaunchSite>& sites = recorder->launch_sites();
  auto site_of = [&](const DeviceKernelRecord& kernel, bool count) -> uint64_t {
    if (kernel.external_id > 0 && kernel.external_id <= sites.size()) {
      if (count) ++summary.by_tag;
      return kernel.external_id;
    }
    auto launched = records.launch_seconds.find(kernel.correlation_id);
    if (launched != records.launch_seconds.end()) {
      if (uint64_t site = SiteOpenAt(sites, launched->second); site > 0) {
        if (count) ++summary.by_launch_time;
        return site;
      }
    }
    if (count) ++summary.unattributed;
    return 0;
  };

  std::vector<Attributed> timed;
  std::vector<const DeviceKernelRecord*> counter_step;
  for (const DeviceKernelRecord& kernel : records.kernels) {
    if (kernel.start_seconds < records.counter_step_end_seconds) {
      counter_step.push_back(&kernel);
    } else {
      timed.push_back(Attributed{&kernel, site_of(kernel, true)});
    }
  }
  summary.timed_kernels = static_cast<int64_t>(timed.size());

  // A stream's lane is that of the ops launched on it (their stream is known exactly); a stream
  // no op used takes the lane of each kernel's site.
  std::unordered_map<uint32_t, ProfileLane> stream_lanes;
  std::unordered_map<uint64_t, double> site_kernel_seconds;
  for (const Attributed& entry : timed) {
    if (entry.site == 0) continue;
    const LaunchSite& site = sites[entry.site - 1];
    if (site.is_op && site.lane != ProfileLane::kHost) {
      stream_lanes.emplace(entry.kernel->stream_id, site.lane);
    }
    site_kernel_seconds[entry.site] += entry.kernel->duration_seconds;
  }

  auto event_for = [&](const DeviceKernelRecord& kernel, uint64_t site_id) {
    ProfileEvent event;
    event.name = kernel.name;
    event.start_seconds = kernel.start_seconds;
    event.duration_seconds = kernel.duration_seconds;
    event.lane = ProfileLane::kCompute;
    event.stream = kernel.stream_id;
    if (site_id > 0) {
      const LaunchSite& site = sites[site_id - 1];
      event.unit = site.unit;
      event.phase = site.phase;
      if (site.lane != ProfileLane::kHost) event.lane = site.lane;
      event.shapes = site.shapes;
      if (site.is_op) event.op = site.name;
    }
    auto lane = stream_lanes.find(kernel.stream_id);
    if (lane != stream_lanes.end()) event.lane = lane->second;
    return event;
  };

  // Rows are the timed kernels'; a counter-step kernel that never ran again adds no row.
  std::set<std::tuple<std::string, std::string, std::string>> timed_rows;
  for (const Attributed& entry : timed) {
    ProfileEvent event = event_for(*entry.kernel, entry.site);
    timed_rows.emplace(event.name, event.unit, event.phase);
    if (entry.site > 0) {
      // The op's analytic cost, shared among its kernels by time: each then runs at the op's
      // rate, which is all the estimate can say.
      const LaunchSite& site = sites[entry.site - 1];
      const double total = site_kernel_seconds[entry.site];
      const double share = total > 0.0 ? entry.kernel->duration_seconds / total : 0.0;
      if (site.is_op && site.flops >= 0.0) event.flops = site.flops * share;
      if (site.is_op && site.bytes >= 0.0) event.bytes = site.bytes * share;
    }
    recorder->RecordDeviceKernel(std::move(event));
  }

  // The counter step: one range per kernel in launch order, i.e. by correlation id. Kernel
  // replay may report a replayed kernel more than once; its first record stands for it.
  std::sort(counter_step.begin(), counter_step.end(),
            [](const DeviceKernelRecord* a, const DeviceKernelRecord* b) {
              if (a->correlation_id != b->correlation_id) {
                return a->correlation_id < b->correlation_id;
              }
              return a->start_seconds < b->start_seconds;
            });
  std::unordered_set<uint32_t> seen;
  size_t reading = 0;
  for (const DeviceKernelRecord* kernel : counter_step) {
    if (!seen.insert(kernel->correlation_id).second) continue;
    ++summary.counter_kernels;
    if (reading >= records.counters.size()) continue;
    const ProfileEvent event = event_for(*kernel, site_of(*kernel, false));
    const CounterRatios& ratios = records.counters[reading++];
    ++summary.counter_readings;
    if (timed_rows.count({event.name, event.unit, event.phase}) == 0) continue;
    recorder->RecordDeviceCounters(event, ratios);
  }
  return summary;
}

}  // namespace fsdpd
