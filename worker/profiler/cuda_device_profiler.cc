#include "worker/profiler/cuda_device_profiler.h"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/cuda_check.h"
#include "proto/spec/job_spec.h"
#include "spdlog/spdlog.h"
#include "worker/profiler/cupti_activity.h"
#include "worker/profiler/cupti_range_profiler.h"

namespace fsdpd {
namespace {

// The current context through the runtime's driver entry points, so the worker does not link
// libcuda and still loads on a machine without a driver.
absl::StatusOr<CUcontext> CurrentContext() {
  using CtxGetCurrent = CUresult (*)(CUcontext*);
  void* entry = nullptr;
  cudaDriverEntryPointQueryResult found{};
  CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &entry, 12000, cudaEnableDefault,
                                              &found));
  if (found != cudaDriverEntryPointSuccess || entry == nullptr) {
    return absl::InternalError("the driver has no cuCtxGetCurrent");
  }
  CUcontext context = nullptr;
  if (reinterpret_cast<CtxGetCurrent>(entry)(&context) != CUDA_SUCCESS || context == nullptr) {
    return absl::InternalError("no current CUDA context for the range profiler");
  }
  return context;
}

class CudaDeviceProfiler : public DeviceProfiler {
 public:
  CudaDeviceProfiler(CudaDeviceProfilerOptions options, CuptiActivityCollector* collector,
                     RooflinePeaks peaks)
      : options_(options), collector_(collector), peaks_(peaks) {
    if (!options_.counters) {
      counters_note_ = "counters are off for this job (profile.counters: false)";
    } else if (options_.world_size > 1) {
      counters_note_ = absl::StrCat(
          "counters are off in a world of ", options_.world_size,
          " ranks: kernel replay would replay NCCL kernels whose peers do not replay with them");
    }
  }

  void PushLaunchSite(uint64_t id) override {
    Report(CuptiActivityCollector::PushScope(id), "tagging a launch site");
  }
  void PopLaunchSite() override {
    Report(CuptiActivityCollector::PopScope(), "closing a launch site");
  }

  absl::Status BeginWindow() override {
    counter_step_end_seconds_ = -std::numeric_limits<double>::infinity();
    counters_.clear();
    CUDA_CHECK(cudaSetDevice(options_.device_index));
    // Work queued before the window is not the window's.
    CUDA_CHECK(cudaDeviceSynchronize());
    return collector_->Start();
  }

  absl::Status BeginCounterStep() override {
    if (!counters_available()) return absl::OkStatus();
    CUDA_CHECK(cudaSetDevice(options_.device_index));
    CUDA_CHECK(cudaDeviceSynchronize());
    absl::StatusOr<CUcontext> context = CurrentContext();
    if (!context.ok()) return Unavailable(context.status());
    CuptiRangeProfilerOptions range_options;
    range_options.device_index = options_.device_index;
    absl::StatusOr<std::unique_ptr<CuptiRangeProfiler>> profiler =
        CuptiRangeProfiler::Create(*context, range_options);
    if (!profiler.ok()) return Unavailable(profiler.status());
    if (absl::Status started = (*profiler)->Start(); !started.ok()) return Unavailable(started);
    spdlog::info("counter step: CUPTI range profiler reads {}",
                 absl::StrJoin((*profiler)->metrics(), ", "));
    range_profiler_ = std::move(*profiler);
    return absl::OkStatus();
  }

  absl::Status EndCounterStep() override {
    if (range_profiler_ == nullptr) return absl::OkStatus();
    CUDA_CHECK(cudaDeviceSynchronize());
    // Replay stretched this step's kernels: whatever happens next, their times are not used.
    counter_step_end_seconds_ = ProfileRecorder::Now();
    absl::StatusOr<std::vector<KernelCounters>> counters = range_profiler_->Stop();
    // Disabled at once: an enabled range profiler would tax every later launch.
    range_profiler_.reset();
    if (!counters.ok()) return Unavailable(counters.status());
    counters_ = std::move(*counters);
    return absl::OkStatus();
  }

  absl::StatusOr<AttributionSummary> EndWindow(ProfileRecorder* recorder) override {
    range_profiler_.reset();
    CUDA_CHECK(cudaSetDevice(options_.device_index));
    CUDA_CHECK(cudaDeviceSynchronize());
    absl::StatusOr<DeviceWindowRecords> records = collector_->Stop();
    if (!records.ok()) return records.status();
    records->counter_step_end_seconds = counter_step_end_seconds_;
    records->counters.reserve(counters_.size());
    for (const KernelCounters& kernel : counters_) records->counters.push_back(kernel.ratios);
    const AttributionSummary summary = AttributeDeviceKernels(*records, recorder);
    if (collector_->dropped_records() > 0) {
      spdlog::warn("CUPTI dropped {} activity records in this window",
                   collector_->dropped_records());
    }
    if (!counters_.empty()) LogPairing(*records);
    return summary;
  }

  RooflinePeaks peaks() const override { return peaks_; }
  bool counters_available() const override { return counters_note_.empty(); }
  std::string counters_note() const override { return counters_note_; }

 private:
  // Counters that cannot be read are an expected condition: the estimate takes over, labelled.
  absl::Status Unavailable(const absl::Status& status) {
    range_profiler_.reset();
    counters_note_ = absl::StrCat("CUPTI counters unavailable: ", status.message());
    spdlog::warn("{}; the kernel table uses the analytic estimate", counters_note_);
    return absl::OkStatus();
  }

  void Report(const absl::Status& status, const char* what) {
    if (status.ok() || reported_tag_error_) return;
    reported_tag_error_ = true;
    spdlog::warn("CUPTI {}: {} (kernels fall back to attribution by launch time)", what,
                 status.ToString());
  }

  // The ranges are the counter step's kernels in launch order; their names show the pairing.
  void LogPairing(const DeviceWindowRecords& records) {
    std::vector<const DeviceKernelRecord*> step;
    for (const DeviceKernelRecord& kernel : records.kernels) {
      if (kernel.start_seconds < records.counter_step_end_seconds) step.push_back(&kernel);
    }
    std::sort(step.begin(), step.end(),
              [](const auto* a, const auto* b) { return a->correlation_id < b->correlation_id; });
    step.erase(std::unique(step.begin(), step.end(),
                           [](const auto* a, const auto* b) {
                             return a->correlation_id == b->correlation_id;
                           }),
               step.end());
    spdlog::info("counter step: {} ranges for {} kernels", counters_.size(), step.size());
    for (size_t i = 0; i < std::min<size_t>({3, step.size(), counters_.size()}); ++i) {
      spdlog::info("  range '{}' <- kernel '{}'", counters_[i].range_name, step[i]->name);
    }
  }

  CudaDeviceProfilerOptions options_;
  CuptiActivityCollector* collector_;
  RooflinePeaks peaks_;
  std::string counters_note_;
  std::unique_ptr<CuptiRangeProfiler> range_profiler_;
  std::vector<KernelCounters> counters_;
  double counter_step_end_seconds_ = -std::numeric_limits<double>::infinity();
  bool reported_tag_error_ = false;
};

}  // namespace

absl::StatusOr<double> CudaPeakMemoryBandwidth(int device_index) {
  int clock_kilohertz = 0;
  int bus_bits = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&clock_kilohertz, cudaDevAttrMemoryClockRate, device_index));
  CUDA_CHECK(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device_index));
  return 2.0 * clock_kilohertz * 1e3 * bus_bits / 8.0;
}

absl::StatusOr<std::unique_ptr<DeviceProfiler>> CreateCudaDeviceProfiler(
    const CudaDeviceProfilerOptions& options) {
  absl::StatusOr<CuptiActivityCollector*> collector = CuptiActivityCollector::Get();
  if (!collector.ok()) return collector.status();
  RooflinePeaks peaks;
  peaks.flops_per_second = options.peak_flops_per_second;
  int major = 0, minor = 0;
  CUDA_CHECK(
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, options.device_index));
  CUDA_CHECK(
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, options.device_index));
  // FP8 tensor cores (sm_89 and newer) run dense FP8 products at twice the bf16 rate.
  if (major * 10 + minor >= kFp8MinComputeCapability) {
    peaks.fp8_flops_per_second = 2.0 * peaks.flops_per_second;
  }
  absl::StatusOr<double> bandwidth = CudaPeakMemoryBandwidth(options.device_index);
  if (bandwidth.ok()) peaks.bytes_per_second = *bandwidth;
  return std::unique_ptr<DeviceProfiler>(new CudaDeviceProfiler(options, *collector, peaks));
}

}  // namespace fsdpd
