#include "worker/profiler/profile_window.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "worker/profiler/chrome_trace.h"

namespace fsdpd {

void ProfileWindow::Schedule(int64_t start_step, int64_t steps, bool counters) {
  if (steps <= 0) return;
  const int64_t first = std::max<int64_t>(start_step, 1);
  pending_.push_back(Pending{first, first + steps, counters});
}

absl::Status ProfileWindow::Request(const v1::ProfileRequest& request, int64_t next_step) {
  if (!request.job_id().empty() && request.job_id() != options_.job_id) {
    return absl::InvalidArgumentError(absl::StrCat("profile request for job '", request.job_id(),
                                                   "' reached job '", options_.job_id, "'"));
  }
  if (request.attempt() != 0 && request.attempt() != options_.attempt) {
    return absl::InvalidArgumentError(absl::StrCat(
        "profile request for attempt ", request.attempt(), " reached attempt ", options_.attempt));
  }
  if (request.steps() <= 0 || request.steps() > kMaxProfileSteps) {
    return absl::InvalidArgumentError(absl::StrCat("profile request asks for ", request.steps(),
                                                   " steps; it must be 1..", kMaxProfileSteps));
  }
  if (recorder_->active()) {
    return absl::FailedPreconditionError(
        absl::StrCat("a profiling window is already recording (since step ", first_recorded_step_,
                     "); the request is ignored"));
  }
  const int64_t first = std::max(request.start_step(), next_step);
  pending_.push_back(Pending{first, first + request.steps(), request.counters()});
  return absl::OkStatus();
}

void ProfileWindow::BeginStep(int64_t step) {
  // Windows wholly in the past can never run.
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(),
                                [step](const Pending& window) { return window.end <= step; }),
                 pending_.end());
  if (recorder_->active()) return;
  for (auto it = pending_.begin(); it != pending_.end(); ++it) {
    if (it->first <= step && step < it->end) {
      current_ = *it;
      pending_.erase(it);
      first_recorded_step_ = step;
      recorded_steps_ = 0;
      recorder_->Start();
      BeginDeviceWindow(step);
      return;
    }
  }
}

void ProfileWindow::BeginDeviceWindow(int64_t step) {
  DeviceProfiler* device = options_.device_profiler;
  device_timed_ = false;
  counter_step_ = 0;
  unattributed_kernels_ = 0;
  timing_note_ = "host-timer";
  counters_note_ = "no hardware counters on this backend";
  if (device == nullptr) return;
  if (absl::Status begun = device->BeginWindow(); !begun.ok()) {
    // Host timers around asynchronous launches measure launches, not kernels: say so.
    spdlog::warn("device timing unavailable for this window: {}", begun.ToString());
    timing_note_ = absl::StrCat("host-timer (device timing unavailable: ", begun.message(), ")");
    recorder_->set_launch_tagger(nullptr);
    return;
  }
  device_timed_ = true;
  timing_note_ = "cupti-activity";
  if (!current_.counters) {
    counters_note_ = "counters not requested for this window";
  } else if (!device->counters_available()) {
    counters_note_ = device->counters_note();
  } else if (current_.end - step < 2) {
    counters_note_ = "counters need a window of at least 2 steps (the first is replayed)";
  } else {
    counter_step_ = step;
    counters_note_.clear();
    if (absl::Status begun = device->BeginCounterStep(); !begun.ok()) {
      spdlog::warn("counter step failed to start: {}", begun.ToString());
    }
  }
}

std::vector<v1::ProfileReport> ProfileWindow::EndStep(int64_t step) {
  if (!recorder_->active()) return {};
  ++recorded_steps_;
  if (step == counter_step_) {
    if (absl::Status ended = options_.device_profiler->EndCounterStep(); !ended.ok()) {
      spdlog::warn("counter step failed: {}", ended.ToString());
    }
  }
  if (step + 1 < current_.end) return {};
  return Close();
}

std::vector<v1::ProfileReport> ProfileWindow::Finish() {
  if (!recorder_->active()) return {};
  return Close();
}

std::vector<v1::ProfileReport> ProfileWindow::Close() {
  if (device_timed_) {
    DeviceProfiler* device = options_.device_profiler;
    absl::StatusOr<AttributionSummary> summary = device->EndWindow(recorder_);
    if (!summary.ok()) {
      spdlog::warn("device records of this window are lost: {}", summary.status().ToString());
      timing_note_ = absl::StrCat("cupti-activity failed: ", summary.status().message());
    } else {
      unattributed_kernels_ = summary->unattributed;
      spdlog::info(
          "device window: {} kernels timed ({} attributed by tag, {} by launch time, {} "
          "unattributed); counter step: {} kernels, {} readings",
          summary->timed_kernels, summary->by_tag, summary->by_launch_time, summary->unattributed,
          summary->counter_kernels, summary->counter_readings);
      if (counter_step_ > 0 && summary->counter_readings == 0) {
        counters_note_ = device->counters_available() ? "the counter step gave no readings"
                                                      : device->counters_note();
      }
    }
  }
  recorder_->Stop();
  // A window whose device timing failed to begin ran on host timers; the next one tries again.
  recorder_->set_launch_tagger(options_.device_profiler);
  return BuildReports();
}

v1::ProfileReport ProfileWindow::Header() const {
  v1::ProfileReport report;
  report.set_job_id(options_.job_id);
  report.set_attempt(options_.attempt);
  report.set_rank(options_.rank);
  report.set_start_step(first_recorded_step_);
  report.set_steps(recorded_steps_);
  report.set_device(options_.device);
  return report;
}

std::vector<v1::ProfileReport> ProfileWindow::BuildReports() {
  RooflinePeaks peaks;
  peaks.flops_per_second = options_.peak_flops_per_second;
  if (device_timed_) {
    const RooflinePeaks device = options_.device_profiler->peaks();
    if (device.flops_per_second > 0.0) peaks.flops_per_second = device.flops_per_second;
    peaks.bytes_per_second = device.bytes_per_second;
    peaks.fp8_flops_per_second = device.fp8_flops_per_second;
  } else if (options_.peak_bytes_per_second <= 0.0) {
    // Measured after the window, so the measurement itself is never in the profile.
    absl::StatusOr<double> measured = MeasureHostMemoryBandwidth();
    if (measured.ok()) {
      options_.peak_bytes_per_second = *measured;
    } else {
      spdlog::warn("no memory bandwidth for the roofline: {}", measured.status().ToString());
    }
  }
  if (!device_timed_) peaks.bytes_per_second = std::max(options_.peak_bytes_per_second, 0.0);

  std::vector<v1::ProfileReport> reports;
  v1::ProfileReport table = Header();
  for (v1::KernelStat& row : recorder_->table().Build(&peaks)) {
    // Device-timed rows with no ratios (collectives, unknown costs) still have device times.
    if (device_timed_ && row.source() == kSourceHostTimer) row.set_source(kSourceDeviceActivity);
    *table.add_kernels() = std::move(row);
  }
  table.set_peak_flops_per_second(std::max(peaks.flops_per_second, 0.0));
  table.set_peak_bytes_per_second(std::max(peaks.bytes_per_second, 0.0));
  reports.push_back(std::move(table));

  ChromeTraceInfo info;
  info.job_id = options_.job_id;
  info.rank = options_.rank;
  info.device = options_.device;
  info.start_step = first_recorded_step_;
  info.steps = recorded_steps_;
  info.dropped_events = recorder_->dropped_trace_events();
  info.timing = timing_note_;
  info.counters = counters_note_.empty() ? "cupti-range-profiler" : counters_note_;
  info.counter_step = counter_step_;
  info.unattributed_kernels = unattributed_kernels_;
  const std::vector<std::string> chunks = SplitIntoChunks(
      BuildChromeTrace(recorder_->trace_events(), info), options_.max_trace_chunk_bytes);
  for (size_t index = 0; index < chunks.size(); ++index) {
    v1::ProfileReport chunk = Header();
    chunk.set_trace_chunk(chunks[index]);
    chunk.set_trace_chunk_index(static_cast<int64_t>(index));
    chunk.set_trace_last(index + 1 == chunks.size());
    reports.push_back(std::move(chunk));
  }
  return reports;
}

}  // namespace fsdpd
