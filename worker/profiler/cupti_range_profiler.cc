#include "worker/profiler/cupti_range_profiler.h"

#include <cupti.h>
#include <cupti_profiler_host.h>
#include <cupti_profiler_target.h>
#include <cupti_range_profiler.h>
#include <cupti_target.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/cuda_check.h"
#include "base/status_macros.h"

namespace fsdpd {
namespace {

constexpr const char* kSmMetric = "sm__throughput.avg.pct_of_peak_sustained_elapsed";
constexpr const char* kMemoryMetric =
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed";
constexpr const char* kDramMetric = "dram__throughput.avg.pct_of_peak_sustained_elapsed";

// CUPTI's parameter structs: zeroed, with their size set (the API's versioning).
template <typename Params>
Params CuptiParams(size_t struct_size) {
  Params params{};
  params.structSize = struct_size;
  return params;
}

// Counter access denied is an expected condition with its own code, not an internal error.
absl::Status CuptiStatus(CUptiResult result, const char* what) {
  if (result == CUPTI_SUCCESS) return absl::OkStatus();
  const char* name = "unknown";
  cuptiGetResultString(result, &name);
  const std::string message = absl::StrCat(what, " failed: ", name);
  if (result == CUPTI_ERROR_INSUFFICIENT_PRIVILEGES) {
    return absl::PermissionDeniedError(
        absl::StrCat(message,
                     "; GPU performance counters are restricted to administrators on this host "
                     "(NVreg_RestrictProfilingToAdminUsers=1)"));
  }
  if (result == CUPTI_ERROR_NOT_SUPPORTED || result == CUPTI_ERROR_INVALID_METRIC_NAME) {
    return absl::UnimplementedError(message);
  }
  return absl::InternalError(message);
}

}  // namespace

struct CuptiRangeProfiler::Handles {
  CUcontext context = nullptr;
  CuptiRangeProfilerOptions options;
  std::string chip_name;
  std::vector<uint8_t> counter_availability;
  CUpti_Profiler_Host_Object* host = nullptr;
  CUpti_RangeProfiler_Object* range_profiler = nullptr;
  std::vector<std::string> metric_names;  // the three base metrics, then the tensor-pipe ones
  std::vector<const char*> metrics;       // views of metric_names, for CUPTI
  std::vector<uint8_t> config_image;
  std::vector<uint8_t> counter_data;

  ~Handles() {
    if (range_profiler != nullptr) {
      auto disable = CuptiParams<CUpti_RangeProfiler_Disable_Params>(
          CUpti_RangeProfiler_Disable_Params_STRUCT_SIZE);
      disable.pRangeProfilerObject = range_profiler;
      cuptiRangeProfilerDisable(&disable);
    }
    if (host != nullptr) {
      auto deinitialize = CuptiParams<CUpti_Profiler_Host_Deinitialize_Params>(
          CUpti_Profiler_Host_Deinitialize_Params_STRUCT_SIZE);
      deinitialize.pHostObject = host;
      cuptiProfilerHostDeinitialize(&deinitialize);
    }
  }

  // A fresh host object whose config holds `names`.
  absl::Status Configure(std::vector<std::string> names) {
    if (host != nullptr) {
      auto deinitialize = CuptiParams<CUpti_Profiler_Host_Deinitialize_Params>(
          CUpti_Profiler_Host_Deinitialize_Params_STRUCT_SIZE);
      deinitialize.pHostObject = host;
      cuptiProfilerHostDeinitialize(&deinitialize);
      host = nullptr;
    }
    metric_names = std::move(names);
    metrics.clear();
    for (const std::string& name : metric_names) metrics.push_back(name.c_str());
    if (absl::Status status = InitializeHost(); !status.ok()) return status;
    return BuildConfigImage();
  }

  absl::Status InitializeHost() {
    auto initialize = CuptiParams<CUpti_Profiler_Host_Initialize_Params>(
        CUpti_Profiler_Host_Initialize_Params_STRUCT_SIZE);
    initialize.profilerType = CUPTI_PROFILER_TYPE_RANGE_PROFILER;
    initialize.pChipName = chip_name.c_str();
    initialize.pCounterAvailabilityImage = counter_availability.data();
    FSDPD_RETURN_IF_ERROR(CuptiStatus(cuptiProfilerHostInitialize(&initialize),
                                      "cuptiProfilerHostInitialize(&initialize)"));
    host = initialize.pHostObject;
    return absl::OkStatus();
  }

  // The config image schedules the metrics' counters over as many passes as they need.
  absl::Status BuildConfigImage() {
    auto add = CuptiParams<CUpti_Profiler_Host_ConfigAddMetrics_Params>(
        CUpti_Profiler_Host_ConfigAddMetrics_Params_STRUCT_SIZE);
    add.pHostObject = host;
    add.ppMetricNames = metrics.data();
    add.numMetrics = metrics.size();
    FSDPD_RETURN_IF_ERROR(CuptiStatus(cuptiProfilerHostConfigAddMetrics(&add),
                                      "cuptiProfilerHostConfigAddMetrics(&add)"));
    auto size = CuptiParams<CUpti_Profiler_Host_GetConfigImageSize_Params>(
        CUpti_Profiler_Host_GetConfigImageSize_Params_STRUCT_SIZE);
    size.pHostObject = host;
    FSDPD_RETURN_IF_ERROR(CuptiStatus(cuptiProfilerHostGetConfigImageSize(&size),
                                      "cuptiProfilerHostGetConfigImageSize(&size)"));
    config_image.assign(size.configImageSize, 0);
    auto image = CuptiParams<CUpti_Profiler_Host_GetConfigImage_Params>(
        CUpti_Profiler_Host_GetConfigImage_Params_STRUCT_SIZE);
    image.pHostObject = host;
    image.configImageSize = config_image.size();
    image.pConfigImage = config_image.data();
    FSDPD_RETURN_IF_ERROR(CuptiStatus(cuptiProfilerHostGetConfigImage(&image),
                                      "cuptiProfilerHostGetConfigImage(&image)"));
    return absl::OkStatus();
  }

  absl::Status BuildCounterData() {
    auto size = CuptiParams<CUpti_RangeProfiler_GetCounterDataSize_Params>(
        CUpti_RangeProfiler_GetCounterDataSize_Params_STRUCT_SIZE);
    size.pRangeProfilerObject = range_profiler;
    size.pMetricNames = metrics.data();
    size.numMetrics = metrics.size();
    size.maxNumOfRanges = options.max_kernels;
    size.maxNumRangeTreeNodes = static_cast<uint32_t>(options.max_kernels);
    FSDPD_RETURN_IF_ERROR(CuptiStatus(cuptiRangeProfilerGetCounterDataSize(&size),
                                      "cuptiRangeProfilerGetCounterDataSize(&size)"));
    counter_data.assign(size.counterDataSize, 0);
    return InitializeCounterData();
  }

  // Also resets the image between windows.
  absl::Status InitializeCounterData() {
    auto initialize = CuptiParams<CUpti_RangeProfiler_CounterDataImage_Initialize_Params>(
        CUpti_RangeProfiler_CounterDataImage_Initialize_Params_STRUCT_SIZE);
    initialize.pRangeProfilerObject = range_profiler;
    initialize.counterDataSize = counter_data.size();
    initialize.pCounterData = counter_data.data();
    FSDPD_RETURN_IF_ERROR(CuptiStatus(cuptiRangeProfilerCounterDataImageInitialize(&initialize),
                                      "cuptiRangeProfilerCounterDataImageInitialize(&initialize)"));
    return absl::OkStatus();
  }
};

CuptiRangeProfiler::CuptiRangeProfiler(std::unique_ptr<Handles> handles)
    : handles_(std::move(handles)) {}

CuptiRangeProfiler::~CuptiRangeProfiler() = default;

absl::StatusOr<std::unique_ptr<CuptiRangeProfiler>> CuptiRangeProfiler::Create(
    CUcontext context, const CuptiRangeProfilerOptions& options) {
  if (options.max_kernels == 0) {
    return absl::InvalidArgumentError("CuptiRangeProfilerOptions.max_kernels must be positive");
  }
  auto handles = std::make_unique<Handles>();
  handles->context = context;
  handles->options = options;

  // Once per process: every window creates a profiler, the library is initialised once.
  static const CUptiResult initialized = [] {
    auto initialize =
        CuptiParams<CUpti_Profiler_Initialize_Params>(CUpti_Profiler_Initialize_Params_STRUCT_SIZE);
    return cuptiProfilerInitialize(&initialize);
  }();
  FSDPD_RETURN_IF_ERROR(CuptiStatus(initialized, "initialized"));

  auto chip =
      CuptiParams<CUpti_Device_GetChipName_Params>(CUpti_Device_GetChipName_Params_STRUCT_SIZE);
  chip.deviceIndex = static_cast<size_t>(options.device_index);
  FSDPD_RETURN_IF_ERROR(
      CuptiStatus(cuptiDeviceGetChipName(&chip), "cuptiDeviceGetChipName(&chip)"));
  handles->chip_name = chip.pChipName;

  // Asked twice: first for the size, then for the image. Restricted counters fail here.
  auto availability = CuptiParams<CUpti_Profiler_GetCounterAvailability_Params>(
      CUpti_Profiler_GetCounterAvailability_Params_STRUCT_SIZE);
  availability.ctx = context;
  FSDPD_RETURN_IF_ERROR(CuptiStatus(cuptiProfilerGetCounterAvailability(&availability),
                                    "cuptiProfilerGetCounterAvailability(&availability)"));
  handles->counter_availability.assign(availability.counterAvailabilityImageSize, 0);
  availability.pCounterAvailabilityImage = handles->counter_availability.data();
  FSDPD_RETURN_IF_ERROR(CuptiStatus(cuptiProfilerGetCounterAvailability(&availability),
                                    "cuptiProfilerGetCounterAvailability(&availability)"));

  // Each tensor-pipe metric is tried on its own: a name the chip does not know fails the whole
  // config, and costs only itself.
  const std::vector<std::string> base = {kSmMetric, kMemoryMetric, kDramMetric};
  std::vector<std::string> accepted = base;
  for (const std::string& candidate : options.tensor_pipe_metrics) {
    std::vector<std::string> trial = accepted;
    trial.push_back(candidate);
    if (handles->Configure(trial).ok()) accepted = std::move(trial);
  }
  if (absl::Status status = handles->Configure(accepted); !status.ok()) return status;

  auto enable =
      CuptiParams<CUpti_RangeProfiler_Enable_Params>(CUpti_RangeProfiler_Enable_Params_STRUCT_SIZE);
  enable.ctx = context;
  FSDPD_RETURN_IF_ERROR(
      CuptiStatus(cuptiRangeProfilerEnable(&enable), "cuptiRangeProfilerEnable(&enable)"));
  handles->range_profiler = enable.pRangeProfilerObject;
  if (absl::Status status = handles->BuildCounterData(); !status.ok()) return status;
  return std::unique_ptr<CuptiRangeProfiler>(new CuptiRangeProfiler(std::move(handles)));
}

const std::vector<std::string>& CuptiRangeProfiler::metrics() const {
  return handles_->metric_names;
}

absl::Status CuptiRangeProfiler::Start() {
  Handles& handles = *handles_;
  if (absl::Status status = handles.InitializeCounterData(); !status.ok()) return status;
  auto config = CuptiParams<CUpti_RangeProfiler_SetConfig_Params>(
      CUpti_RangeProfiler_SetConfig_Params_STRUCT_SIZE);
  config.pRangeProfilerObject = handles.range_profiler;
  config.configSize = handles.config_image.size();
  config.pConfig = handles.config_image.data();
  config.counterDataImageSize = handles.counter_data.size();
  config.pCounterDataImage = handles.counter_data.data();
  // Auto range: every kernel is its own range. Kernel replay: CUPTI replays each kernel for
  // the passes the metrics need, so one run of the step measures all of them.
  config.range = CUPTI_AutoRange;
  config.replayMode = CUPTI_KernelReplay;
  config.maxRangesPerPass = handles.options.max_kernels;
  config.numNestingLevels = 1;
  config.minNestingLevel = 1;
  config.passIndex = 0;
  config.targetNestingLevel = 1;
  FSDPD_RETURN_IF_ERROR(
      CuptiStatus(cuptiRangeProfilerSetConfig(&config), "cuptiRangeProfilerSetConfig(&config)"));
  auto start =
      CuptiParams<CUpti_RangeProfiler_Start_Params>(CUpti_RangeProfiler_Start_Params_STRUCT_SIZE);
  start.pRangeProfilerObject = handles.range_profiler;
  FSDPD_RETURN_IF_ERROR(
      CuptiStatus(cuptiRangeProfilerStart(&start), "cuptiRangeProfilerStart(&start)"));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<KernelCounters>> CuptiRangeProfiler::Stop() {
  Handles& handles = *handles_;
  auto stop =
      CuptiParams<CUpti_RangeProfiler_Stop_Params>(CUpti_RangeProfiler_Stop_Params_STRUCT_SIZE);
  stop.pRangeProfilerObject = handles.range_profiler;
  FSDPD_RETURN_IF_ERROR(
      CuptiStatus(cuptiRangeProfilerStop(&stop), "cuptiRangeProfilerStop(&stop)"));
  auto decode = CuptiParams<CUpti_RangeProfiler_DecodeData_Params>(
      CUpti_RangeProfiler_DecodeData_Params_STRUCT_SIZE);
  decode.pRangeProfilerObject = handles.range_profiler;
  FSDPD_RETURN_IF_ERROR(
      CuptiStatus(cuptiRangeProfilerDecodeData(&decode), "cuptiRangeProfilerDecodeData(&decode)"));

  auto info = CuptiParams<CUpti_RangeProfiler_GetCounterDataInfo_Params>(
      CUpti_RangeProfiler_GetCounterDataInfo_Params_STRUCT_SIZE);
  info.pCounterDataImage = handles.counter_data.data();
  info.counterDataImageSize = handles.counter_data.size();
  FSDPD_RETURN_IF_ERROR(CuptiStatus(cuptiRangeProfilerGetCounterDataInfo(&info),
                                    "cuptiRangeProfilerGetCounterDataInfo(&info)"));

  std::vector<KernelCounters> kernels;
  kernels.reserve(info.numTotalRanges);
  std::vector<double> values(handles.metrics.size(), 0.0);
  for (size_t range = 0; range < info.numTotalRanges; ++range) {
    auto range_info = CuptiParams<CUpti_RangeProfiler_CounterData_GetRangeInfo_Params>(
        CUpti_RangeProfiler_CounterData_GetRangeInfo_Params_STRUCT_SIZE);
    range_info.pCounterDataImage = handles.counter_data.data();
    range_info.counterDataImageSize = handles.counter_data.size();
    range_info.rangeIndex = range;
    range_info.rangeDelimiter = "/";
    FSDPD_RETURN_IF_ERROR(CuptiStatus(cuptiRangeProfilerCounterDataGetRangeInfo(&range_info),
                                      "cuptiRangeProfilerCounterDataGetRangeInfo(&range_info)"));

    // One metric at a time, so a metric the chip cannot evaluate costs only its own column.
    for (size_t metric = 0; metric < handles.metrics.size(); ++metric) {
      auto evaluate = CuptiParams<CUpti_Profiler_Host_EvaluateToGpuValues_Params>(
          CUpti_Profiler_Host_EvaluateToGpuValues_Params_STRUCT_SIZE);
      evaluate.pHostObject = handles.host;
      evaluate.pCounterDataImage = handles.counter_data.data();
      evaluate.counterDataImageSize = handles.counter_data.size();
      evaluate.rangeIndex = range;
      evaluate.ppMetricNames = &handles.metrics[metric];
      evaluate.numMetrics = 1;
      evaluate.pMetricValues = &values[metric];
      // A percentage below zero marks the value unknown once divided into a ratio.
      if (cuptiProfilerHostEvaluateToGpuValues(&evaluate) != CUPTI_SUCCESS) values[metric] = -100.0;
    }

    KernelCounters kernel;
    kernel.range_name = range_info.rangeName != nullptr ? range_info.rangeName : "";
    // The metrics are percentages of peak; the table keeps fractions.
    kernel.ratios.sm = values[0] / 100.0;
    kernel.ratios.memory = values[1] / 100.0;
    kernel.ratios.dram = values[2] / 100.0;
    kernel.ratios.tensor_pipe = -1.0;
    for (size_t metric = 3; metric < values.size(); ++metric) {
      kernel.ratios.tensor_pipe = std::max(kernel.ratios.tensor_pipe, values[metric] / 100.0);
    }
    if (kernel.ratios.sm < 0.0 && kernel.ratios.memory < 0.0 && kernel.ratios.dram < 0.0) {
      return absl::InternalError(
          absl::StrCat("CUPTI could not evaluate any metric of range ", range));
    }
    kernels.push_back(std::move(kernel));
  }
  return kernels;
}

}  // namespace fsdpd
