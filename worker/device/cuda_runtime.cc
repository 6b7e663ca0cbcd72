#include "worker/device/cuda_runtime.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/cuda_check.h"
#include "base/env_choice.h"
#include "base/status_macros.h"
#include "spdlog/spdlog.h"
#include "worker/backend/cuda_backend.h"
#include "worker/backend/cuda_ops.h"
#include "worker/comm/gloo_communicator.h"
#include "worker/comm/host_staged_communicator.h"
#include "worker/comm/local_communicator.h"
#include "worker/comm/nccl_communicator.h"
#include "worker/device/cpu_runtime.h"
#include "worker/device/cuda_memory.h"
#include "worker/profiler/cuda_device_profiler.h"
#include "worker/profiler/cuda_stream_wait_timer.h"

namespace fsdpd {

absl::StatusOr<std::unique_ptr<DeviceRuntime>> CreateCudaRuntime(int index) {
  const int count = CudaBackend::DeviceCount();
  if (index < 0 || index >= count) {
    return absl::NotFoundError(absl::StrCat("cuda:", index, " does not exist (", count,
                                            " CUDA device", count == 1 ? "" : "s", " visible)"));
  }
  return std::unique_ptr<DeviceRuntime>(new CudaRuntime(index));
}

absl::StatusOr<DeviceInfo> CudaRuntime::Describe() const {
  cudaDeviceProp properties{};
  CUDA_CHECK(cudaGetDeviceProperties(&properties, index_));
  DeviceInfo info;
  info.kind = "cuda";
  info.gpu_index = index_;
  info.gpu_name = properties.name;
  info.compute_capability = properties.major * 10 + properties.minor;
  // What a job may use is what is free now: other processes on the device (and this one's
  // context) hold the rest.
  FSDPD_ASSIGN_OR_RETURN(const DriverMemory memory, QueryDriverMemory(index_));
  info.memory_bytes = memory.total_bytes - memory.used_bytes;
  // "GPU-xxxxxxxx-…", as nvidia-smi and dcgm-exporter print it.
  const auto* uuid = reinterpret_cast<const unsigned char*>(properties.uuid.bytes);
  info.gpu_uuid =
      absl::StrFormat("GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
                      uuid[0], uuid[1], uuid[2], uuid[3], uuid[4], uuid[5], uuid[6], uuid[7],
                      uuid[8], uuid[9], uuid[10], uuid[11], uuid[12], uuid[13], uuid[14], uuid[15]);
  return info;
}

absl::StatusOr<std::unique_ptr<Backend>> CudaRuntime::CreateBackend() const {
  CudaBackendConfig config;
  config.device = index_;
  // FSDPD_STREAM_PRIORITY=compute|comm: see CudaBackendConfig::stream_priority.
  FSDPD_ASSIGN_OR_RETURN(const std::string chosen,
                         EnvChoice("FSDPD_STREAM_PRIORITY", {"equal", "compute", "comm"}));
  using StreamPriority = CudaBackendConfig::StreamPriority;
  config.stream_priority = chosen == "compute" ? StreamPriority::kComputeFirst
                           : chosen == "comm"  ? StreamPriority::kCommFirst
                                               : StreamPriority::kEqual;
  // FSDPD_OPTIMIZER_SMS=N: see CudaBackendConfig::optimizer_sms.
  FSDPD_ASSIGN_OR_RETURN(const int64_t optimizer_sms, EnvCount("FSDPD_OPTIMIZER_SMS"));
  config.optimizer_sms = static_cast<int>(std::min<int64_t>(optimizer_sms, 1 << 20));
  absl::StatusOr<std::unique_ptr<CudaBackend>> backend = CudaBackend::Create(config);
  if (!backend.ok()) return backend.status();
  return std::unique_ptr<Backend>(std::move(*backend));
}

namespace {

// Staging copies on the collective's own stream, finished before they return.
class CudaCopier : public DeviceCopier {
 public:
  absl::Status ToHost(const Tensor& device, void* host, Stream& stream) override {
    FSDPD_ASSIGN_OR_RETURN(cudaStream_t cuda_stream, CudaStreamOf(stream));
    CUDA_CHECK(cudaMemcpyAsync(host, device.data, static_cast<size_t>(device.bytes()),
                               cudaMemcpyDeviceToHost, cuda_stream));
    CUDA_CHECK(cudaStreamSynchronize(cuda_stream));
    return absl::OkStatus();
  }
  absl::Status ToDevice(const void* host, const Tensor& device, Stream& stream) override {
    FSDPD_ASSIGN_OR_RETURN(cudaStream_t cuda_stream, CudaStreamOf(stream));
    CUDA_CHECK(cudaMemcpyAsync(device.data, host, static_cast<size_t>(device.bytes()),
                               cudaMemcpyHostToDevice, cuda_stream));
    CUDA_CHECK(cudaStreamSynchronize(cuda_stream));
    return absl::OkStatus();
  }
};

}  // namespace

// One rank: local device copies, no NCCL. More: NCCL, one rank per GPU; where ranks of the
// attempt share a GPU (NCCL refuses that), Gloo over host copies
// (worker/comm/host_staged_communicator.h), decided alike on every rank.
absl::StatusOr<std::unique_ptr<Communicator>> CudaRuntime::CreateCommunicator(
    const CommunicatorOptions& options, KeyValueStore* store) const {
  if (options.world_size == 1 && options.rank == 0) {
    spdlog::info("rank {}: world of one rank: collectives are local copies on cuda:{} (no NCCL)",
                 options.rank, index_);
    return LocalCommunicator::Create(
        [](const Tensor& src, const Tensor& dst, Stream& stream) -> absl::Status {
          FSDPD_ASSIGN_OR_RETURN(cudaStream_t cuda_stream, CudaStreamOf(stream));
          CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, static_cast<size_t>(dst.bytes()),
                                     cudaMemcpyDeviceToDevice, cuda_stream));
          return absl::OkStatus();
        });
  }
  if (options.world_size > 1 && store != nullptr) {
    FSDPD_ASSIGN_OR_RETURN(const DeviceInfo info, Describe());
    FSDPD_ASSIGN_OR_RETURN(const bool shared,
                           RanksShareADevice(*store, options.rank, options.world_size,
                                             info.gpu_uuid, options.timeout));
    if (shared) {
      spdlog::warn(
          "rank {}: ranks of this job share a GPU; collectives go through host memory "
          "and Gloo instead of NCCL (correct, but slow)",
          options.rank);
      return HostStagedCommunicator::Connect(options, store, std::make_unique<CudaCopier>());
    }
  }
  NcclCommunicatorOptions nccl;
  nccl.rank = options.rank;
  nccl.world_size = options.world_size;
  nccl.device = index_;
  nccl.timeout = options.timeout;
  return NcclCommunicator::Connect(nccl, store);
}

absl::StatusOr<double> CudaRuntime::PeakFlops(Backend& backend) const {
  if (std::getenv("FSDPD_PEAK_FLOPS") == nullptr) {
    absl::StatusOr<double> peak = CudaPeakBf16Flops(index_);
    if (peak.ok() && *peak > 0.0) return *peak;
  }
  return MeasuredPeakFlops(backend);
}

CudaRuntime::CudaRuntime(int index)
    : index_(index), process_memory_(std::make_unique<BackgroundReading<MemoryInUse>>([index] {
        absl::StatusOr<MemoryInUse> used = DeviceMemoryInUse(index);
        return used.ok() ? *used : MemoryInUse{};
      })) {}

MemoryInUse CudaRuntime::ProcessMemory() const { return process_memory_->Latest(); }

std::optional<DriverMemory> CudaRuntime::DeviceMemory() const {
  absl::StatusOr<DriverMemory> driver = QueryDriverMemory(index_);
  if (!driver.ok()) return std::nullopt;
  return *driver;
}

std::unique_ptr<DeviceProfiler> CudaRuntime::CreateDeviceProfiler(int world_size,
                                                                  double peak_flops_per_second,
                                                                  const DeviceLog& log) const {
  CudaDeviceProfilerOptions options;
  options.device_index = index_;
  options.world_size = world_size;
  options.peak_flops_per_second = peak_flops_per_second;
  absl::StatusOr<std::unique_ptr<DeviceProfiler>> profiler = CreateCudaDeviceProfiler(options);
  if (!profiler.ok()) {
    log("warning", absl::StrCat("CUPTI is unavailable (", profiler.status().message(),
                                "): profiling windows time kernel launches on the host"));
    return nullptr;
  }
  return std::move(*profiler);
}

std::unique_ptr<StreamWaitTimer> CudaRuntime::CreateStreamWaitTimer(Backend& backend) const {
  return CreateCudaStreamWaitTimer(backend);
}

absl::StatusOr<double> CudaPeakBf16Flops(int index) {
  int major = 0;
  int multiprocessors = 0;
  int clock_kilohertz = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, index));
  CUDA_CHECK(cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, index));
  CUDA_CHECK(cudaDeviceGetAttribute(&clock_kilohertz, cudaDevAttrClockRate, index));
  double flops_per_clock = 0.0;
  if (major == 8) flops_per_clock = 2048.0;
  if (major == 9) flops_per_clock = 4096.0;
  if (major == 10) flops_per_clock = 8192.0;
  return flops_per_clock * multiprocessors * clock_kilohertz * 1e3;
}

}  // namespace fsdpd
