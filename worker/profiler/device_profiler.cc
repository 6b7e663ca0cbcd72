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

// A row of the kernel table: kernel name, unit, phase.
using RowKey = std::tuple<std::string, std::string, std::string>;

// One window's attribution, in the steps AttributeDeviceKernels names.
class KernelAttribution {
 public:
  KernelAttribution(const DeviceWindowRecords& records, ProfileRecorder* recorder)
      : records_(records), recorder_(recorder), sites_(recorder->launch_sites()) {}

  // The timed kernels with their launch sites; the counter step's kernels apart, unattributed.
  void SplitAtCounterStep() {
    for (const DeviceKernelRecord& kernel : records_.kernels) {
      if (kernel.start_seconds < records_.counter_step_end_seconds) {
        counter_step_.push_back(&kernel);
      } else {
        timed_.push_back(Attributed{&kernel, SiteOf(kernel, /*count=*/true)});
      }
    }
    summary_.timed_kernels = static_cast<int64_t>(timed_.size());
  }

  // A stream's lane is that of the ops launched on it (their stream is known exactly); a stream
  // no op used takes the lane of each kernel's site. Also sums each site's kernel time.
  void LearnStreamLanes() {
    for (const Attributed& entry : timed_) {
      if (entry.site == 0) continue;
      const LaunchSite& site = sites_[entry.site - 1];
      if (site.is_op && site.lane != ProfileLane::kHost) {
        stream_lanes_.emplace(entry.kernel->stream_id, site.lane);
      }
      site_kernel_seconds_[entry.site] += entry.kernel->duration_seconds;
    }
  }

  // Rows are the timed kernels'; each carries its share of the launching op's analytic cost.
  void RecordTimedKernels() {
    for (const Attributed& entry : timed_) {
      ProfileEvent event = EventFor(*entry.kernel, entry.site);
      timed_rows_.emplace(event.name, event.unit, event.phase);
      if (entry.site > 0) ShareOpCost(entry, &event);
      recorder_->RecordDeviceKernel(std::move(event));
    }
  }

  // The counter step: one reading per kernel in launch order, i.e. by correlation id. Kernel
  // replay may report a replayed kernel more than once; its first record stands for it. A
  // counter-step kernel that never ran again adds no row.
  void RecordCounterStep() {
    std::sort(counter_step_.begin(), counter_step_.end(),
              [](const DeviceKernelRecord* a, const DeviceKernelRecord* b) {
                if (a->correlation_id != b->correlation_id) {
                  return a->correlation_id < b->correlation_id;
                }
                return a->start_seconds < b->start_seconds;
              });
    std::unordered_set<uint32_t> seen;
    size_t reading = 0;
    for (const DeviceKernelRecord* kernel : counter_step_) {
      if (!seen.insert(kernel->correlation_id).second) continue;
      ++summary_.counter_kernels;
      if (reading >= records_.counters.size()) continue;
      const ProfileEvent event = EventFor(*kernel, SiteOf(*kernel, /*count=*/false));
      const CounterRatios& ratios = records_.counters[reading++];
      ++summary_.counter_readings;
      if (timed_rows_.count({event.name, event.unit, event.phase}) == 0) continue;
      recorder_->RecordDeviceCounters(event, ratios);
    }
  }

  const AttributionSummary& summary() const { return summary_; }

 private:
  // The site tagged at launch, else the innermost site open when the launching call began;
  // 0 when neither. `count`: add it to the summary.
  uint64_t SiteOf(const DeviceKernelRecord& kernel, bool count) {
    if (kernel.external_id > 0 && kernel.external_id <= sites_.size()) {
      if (count) ++summary_.by_tag;
      return kernel.external_id;
    }
    auto launched = records_.launch_seconds.find(kernel.correlation_id);
    if (launched != records_.launch_seconds.end()) {
      if (uint64_t site = SiteOpenAt(sites_, launched->second); site > 0) {
        if (count) ++summary_.by_launch_time;
        return site;
      }
    }
    if (count) ++summary_.unattributed;
    return 0;
  }

  // The trace event of `kernel`: unit, phase, shapes and op of its site; lane of its stream.
  ProfileEvent EventFor(const DeviceKernelRecord& kernel, uint64_t site_id) const {
    ProfileEvent event;
    event.name = kernel.name;
    event.start_seconds = kernel.start_seconds;
    event.duration_seconds = kernel.duration_seconds;
    event.lane = ProfileLane::kCompute;
    event.stream = kernel.stream_id;
    if (site_id > 0) {
      const LaunchSite& site = sites_[site_id - 1];
      event.unit = site.unit;
      event.phase = site.phase;
      if (site.lane != ProfileLane::kHost) event.lane = site.lane;
      event.shapes = site.shapes;
      if (site.is_op) event.op = site.name;
    }
    auto lane = stream_lanes_.find(kernel.stream_id);
    if (lane != stream_lanes_.end()) event.lane = lane->second;
    return event;
  }

  // The op's analytic cost, shared among its kernels by time: each then runs at the op's rate,
  // which is all the estimate can say.
  void ShareOpCost(const Attributed& entry, ProfileEvent* event) {
    const LaunchSite& site = sites_[entry.site - 1];
    const double total = site_kernel_seconds_[entry.site];
    const double share = total > 0.0 ? entry.kernel->duration_seconds / total : 0.0;
    if (site.is_op && site.flops >= 0.0) event->flops = site.flops * share;
    if (site.is_op && site.bytes >= 0.0) event->bytes = site.bytes * share;
  }

  const DeviceWindowRecords& records_;
  ProfileRecorder* recorder_;
  const std::vector<LaunchSite>& sites_;
  AttributionSummary summary_;
  std::vector<Attributed> timed_;
  std::vector<const DeviceKernelRecord*> counter_step_;
  std::unordered_map<uint32_t, ProfileLane> stream_lanes_;
  std::unordered_map<uint64_t, double> site_kernel_seconds_;
  std::set<RowKey> timed_rows_;
};

}  // namespace

AttributionSummary AttributeDeviceKernels(const DeviceWindowRecords& records,
                                          ProfileRecorder* recorder) {
  KernelAttribution attribution(records, recorder);
  attribution.SplitAtCounterStep();
  attribution.LearnStreamLanes();
  attribution.RecordTimedKernels();
  attribution.RecordCounterStep();
  return attribution.summary();
}

}  // namespace fsdpd
