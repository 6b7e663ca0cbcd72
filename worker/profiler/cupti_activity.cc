#include "worker/profiler/cupti_activity.h"

#include <cupti.h>
#include <cxxabi.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "base/cuda_check.h"

namespace fsdpd {
namespace {

// CUPTI's buffers must be 8-byte aligned; 8 MiB holds tens of thousands of kernel records, so a
// window's records rarely need more than a few.
constexpr size_t kBufferBytes = size_t{8} << 20;
constexpr size_t kBufferAlignment = 8;

struct Collected {
  std::mutex mutex;
  std::vector<DeviceKernelRecord> kernels;
  std::unordered_map<uint32_t, uint64_t> external_ids;  // correlation id → scope id
  std::unordered_map<uint32_t, double> launch_seconds;  // correlation id → API call start
  int64_t dropped = 0;
  // steady-clock seconds minus CUPTI seconds: 0 when CUPTI takes the steady clock, else
  // measured at Start.
  double clock_offset_seconds = 0.0;
  bool steady_timestamps = false;
};

Collected& State() {
  static Collected* const state = new Collected();
  return *state;
}

void CUPTIAPI BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kBufferAlignment, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

// Runs on a CUPTI thread.
void CUPTIAPI BufferCompleted(CUcontext context, uint32_t stream_id, uint8_t* buffer,
                              size_t /*size*/, size_t valid_size) {
  Collected& state = State();
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    CUpti_Activity* record = nullptr;
    while (cuptiActivityGetNextRecord(buffer, valid_size, &record) == CUPTI_SUCCESS) {
      if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
        const auto* kernel = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
        DeviceKernelRecord out;
        out.name = DemangleKernelName(kernel->name);
        out.mangled_name = kernel->name != nullptr ? kernel->name : "";
        out.device_id = kernel->deviceId;
        out.stream_id = kernel->streamId;
        out.correlation_id = kernel->correlationId;
        out.start_seconds = kernel->start * 1e-9 + state.clock_offset_seconds;
        out.duration_seconds = (kernel->end - kernel->start) * 1e-9;
        state.kernels.push_back(std::move(out));
      } else if (record->kind == CUPTI_ACTIVITY_KIND_RUNTIME ||
                 record->kind == CUPTI_ACTIVITY_KIND_DRIVER) {
        const auto* call = reinterpret_cast<const CUpti_ActivityAPI*>(record);
        state.launch_seconds.emplace(call->correlationId,
                                     call->start * 1e-9 + state.clock_offset_seconds);
      } else if (record->kind == CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION) {
        const auto* correlation =
            reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(record);
        if (correlation->externalKind == CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0) {
          state.external_ids[correlation->correlationId] = correlation->externalId;
        }
      }
    }
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(context, stream_id, &dropped) == CUPTI_SUCCESS) {
      state.dropped += static_cast<int64_t>(dropped);
    }
  }
  std::free(buffer);
}

double SteadySeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// CUPTI's clock: the steady clock in nanoseconds, ProfileRecorder::Now()'s, so device records
// and host ranges share one time line with no offset to estimate.
uint64_t CUPTIAPI SteadyNanoseconds() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace

std::string DemangleKernelName(const char* name) {
  if (name == nullptr) return "unknown";
  int status = 0;
  char* demangled = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  if (status != 0 || demangled == nullptr) return name;
  std::string result(demangled);
  std::free(demangled);
  return result;
}

absl::StatusOr<CuptiActivityCollector*> CuptiActivityCollector::Get() {
  static absl::StatusOr<CuptiActivityCollector*>* const collector = [] {
    auto* result = new absl::StatusOr<CuptiActivityCollector*>(
        absl::InternalError("the CUPTI activity callbacks could not be registered"));
    // Before any activity is enabled, so every record uses it; without it, the offset measured
    // at Start converts CUPTI's own clock.
    State().steady_timestamps =
        cuptiActivityRegisterTimestampCallback(SteadyNanoseconds) == CUPTI_SUCCESS;
    const CUptiResult registered = cuptiActivityRegisterCallbacks(BufferRequested, BufferCompleted);
    if (registered == CUPTI_SUCCESS) {
      *result = new CuptiActivityCollector();
    } else {
      const char* name = "unknown";
      cuptiGetResultString(registered, &name);
      *result = absl::FailedPreconditionError(
          absl::StrCat("cuptiActivityRegisterCallbacks failed: ", name));
    }
    return result;
  }();
  return *collector;
}

absl::Status CuptiActivityCollector::Start() {
  Collected& state = State();
  uint64_t cupti_now = 0;
  CUPTI_CHECK(cuptiGetTimestamp(&cupti_now));
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    state.kernels.clear();
    state.external_ids.clear();
    state.launch_seconds.clear();
    state.dropped = 0;
    state.clock_offset_seconds = state.steady_timestamps ? 0.0 : SteadySeconds() - cupti_now * 1e-9;
  }
  CUPTI_CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION));
  // External correlation records are made for API calls that CUPTI records: the runtime's
  // launches, and the driver's (NCCL launches through the driver).
  CUPTI_CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME));
  CUPTI_CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_DRIVER));
  CUPTI_CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
  return absl::OkStatus();
}

absl::StatusOr<DeviceWindowRecords> CuptiActivityCollector::Stop() {
  CUPTI_CHECK(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
  CUPTI_CHECK(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_DRIVER));
  CUPTI_CHECK(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_RUNTIME));
  CUPTI_CHECK(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION));
  // Forced: also hands over buffers that are not full yet, so nothing of the window is left.
  CUPTI_CHECK(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
  Collected& state = State();
  std::lock_guard<std::mutex> lock(state.mutex);
  std::vector<DeviceKernelRecord> kernels = std::move(state.kernels);
  state.kernels.clear();
  for (DeviceKernelRecord& kernel : kernels) {
    auto found = state.external_ids.find(kernel.correlation_id);
    if (found != state.external_ids.end()) kernel.external_id = found->second;
  }
  std::stable_sort(kernels.begin(), kernels.end(),
                   [](const DeviceKernelRecord& a, const DeviceKernelRecord& b) {
                     return a.start_seconds < b.start_seconds;
                   });
  DeviceWindowRecords records;
  records.kernels = std::move(kernels);
  records.launch_seconds = std::move(state.launch_seconds);
  state.launch_seconds.clear();
  state.external_ids.clear();
  return records;
}

absl::Status CuptiActivityCollector::PushScope(uint64_t id) {
  CUPTI_CHECK(cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, id));
  return absl::OkStatus();
}

absl::Status CuptiActivityCollector::PopScope() {
  uint64_t last = 0;
  CUPTI_CHECK(
      cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &last));
  return absl::OkStatus();
}

int64_t CuptiActivityCollector::dropped_records() const {
  Collected& state = State();
  std::lock_guard<std::mutex> lock(state.mutex);
  return state.dropped;
}

}  // namespace fsdpd
