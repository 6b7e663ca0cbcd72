#include "worker/backend/cuda_backend.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/cuda_check.h"
#include "proto/spec/job_spec.h"
#include "spdlog/spdlog.h"

namespace fsdpd {
namespace {

class CudaBuffer : public Buffer {
 public:
  CudaBuffer(std::shared_ptr<CudaAllocator> allocator, void* data, int64_t bytes)
      : allocator_(std::move(allocator)), data_(data), bytes_(bytes) {}
  ~CudaBuffer() override { allocator_->Free(data_); }
  void* data() const override { return data_; }
  int64_t bytes() const override { return bytes_; }

 private:
  std::shared_ptr<CudaAllocator> allocator_;
  void* data_;
  int64_t bytes_;
};

class CudaEvent : public Event {
 public:
  explicit CudaEvent(cudaEvent_t event) : event_(event) {}
  ~CudaEvent() override { cudaEventDestroy(event_); }

  absl::Status Record(Stream& stream) override {
    absl::StatusOr<cudaStream_t> cuda_stream = CudaStreamOf(stream);
    if (!cuda_stream.ok()) return cuda_stream.status();
    CUDA_CHECK(cudaEventRecord(event_, *cuda_stream));
    return absl::OkStatus();
  }
  absl::Status WaitOn(Stream& waiting_stream) override {
    absl::StatusOr<cudaStream_t> cuda_stream = CudaStreamOf(waiting_stream);
    if (!cuda_stream.ok()) return cuda_stream.status();
    CUDA_CHECK(cudaStreamWaitEvent(*cuda_stream, event_, 0));
    return absl::OkStatus();
  }
  absl::Status Synchronize() override {
    CUDA_CHECK(cudaEventSynchronize(event_));
    return absl::OkStatus();
  }

 private:
  cudaEvent_t event_;
};

absl::Status CheckCopy(const char* what, const void* host, const Tensor& device) {
  if (device.numel() > 0 && (host == nullptr || device.data == nullptr)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": null pointer with ", device.Describe()));
  }
  return absl::OkStatus();
}

}  // namespace

CudaStream::~CudaStream() {
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

absl::Status CudaStream::Synchronize() {
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  return absl::OkStatus();
}

absl::StatusOr<cudaStream_t> CudaStreamOf(Stream& stream) {
  auto* cuda_stream = dynamic_cast<CudaStream*>(&stream);
  if (cuda_stream == nullptr) {
    return absl::InvalidArgumentError("a CUDA op was given a stream of another backend");
  }
  return cuda_stream->get();
}

int CudaBackend::DeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

CudaBackend::CudaBackend(const CudaBackendConfig& config) : config_(config) {}

CudaBackend::~CudaBackend() {
  // Work still queued may use the buffers released below.
  if (compute_stream_ != nullptr) compute_stream_->Synchronize().IgnoreError();
  if (comm_stream_ != nullptr) comm_stream_->Synchronize().IgnoreError();
  ops_.reset();
  fp8_gemm_.reset();
  gemm_.reset();
  gemm_workspace_.reset();
}

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(const CudaBackendConfig& config) {
  const int count = DeviceCount();
  if (config.device < 0 || config.device >= count) {
    return absl::NotFoundError(absl::StrCat("cuda:", config.device, " does not exist (", count,
                                            " CUDA device", count == 1 ? "" : "s", " visible)"));
  }
  CUDA_CHECK(cudaSetDevice(config.device));
  std::unique_ptr<CudaBackend> backend(new CudaBackend(config));
  backend->allocator_ = std::make_shared<CudaAllocator>(
      CudaAllocatorConfig{config.device, config.memory_limit_bytes});
  int least_priority = 0;
  int greatest_priority = 0;
  using StreamPriority = CudaBackendConfig::StreamPriority;
  if (config.stream_priority != StreamPriority::kEqual) {
    CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least_priority, &greatest_priority));
  }
  // Lower numbers are higher priorities.
  const bool compute_first = config.stream_priority != StreamPriority::kCommFirst;
  for (std::unique_ptr<CudaStream>* slot : {&backend->compute_stream_, &backend->comm_stream_}) {
    const bool first = (slot == &backend->compute_stream_) == compute_first;
    const int priority = first ? greatest_priority : least_priority;
    cudaStream_t stream = nullptr;
    CUDA_CHECK(cudaStreamCreateWithPriority(&stream, cudaStreamNonBlocking, priority));
    *slot = std::make_unique<CudaStream>(config.device, stream);
  }
  cuda::GemmConfig gemm_config = config.gemm;
  if (config.optimizer_sms != 0) {
    int sms = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, config.device));
    if (config.optimizer_sms < 1 || config.optimizer_sms >= sms) {
      return absl::InvalidArgumentError(
          absl::StrCat("FSDPD_OPTIMIZER_SMS: the optimizer's SMs must be from 1 to ", sms - 1,
                       " (cuda:", config.device, " has ", sms, "), got ", config.optimizer_sms));
    }
    gemm_config.sm_count_target = sms - config.optimizer_sms;
  }
  absl::StatusOr<std::unique_ptr<Buffer>> workspace =
      backend->Allocate(gemm_config.workspace_bytes);
  if (!workspace.ok()) return workspace.status();
  backend->gemm_workspace_ = std::move(*workspace);
  absl::StatusOr<std::unique_ptr<cuda::Gemm>> gemm =
      cuda::Gemm::Create(backend->gemm_workspace_->data(), gemm_config);
  if (!gemm.ok()) return gemm.status();
  backend->gemm_ = std::move(*gemm);
  cudaDeviceProp properties{};
  const bool have_properties = cudaGetDeviceProperties(&properties, config.device) == cudaSuccess;
  if (have_properties && properties.major * 10 + properties.minor >= kFp8MinComputeCapability) {
    // The FP8 products share the bf16 products' workspace: both run on the compute stream, one
    // at a time.
    cuda::Fp8GemmConfig fp8_config;
    fp8_config.workspace_bytes = gemm_config.workspace_bytes;
    fp8_config.sm_count_target = gemm_config.sm_count_target;
    absl::StatusOr<std::unique_ptr<cuda::Fp8Gemm>> fp8_gemm =
        cuda::Fp8Gemm::Create(backend->gemm_workspace_->data(), fp8_config);
    if (!fp8_gemm.ok()) return fp8_gemm.status();
    backend->fp8_gemm_ = std::move(*fp8_gemm);
  }
  backend->ops_ = std::make_unique<CheckedOps>(
      std::make_unique<CudaOps>(backend->allocator_.get(), backend->gemm_.get(),
                                config.optimizer_sms, backend->fp8_gemm_.get()));
  if (have_properties) {
    spdlog::info("cuda:{}: {} (sm_{}{}, {} MiB)", config.device, properties.name, properties.major,
                 properties.minor, properties.totalGlobalMem >> 20);
  }
  return backend;
}

absl::StatusOr<std::unique_ptr<Buffer>> CudaBackend::Allocate(int64_t bytes) {
  absl::StatusOr<void*> data = allocator_->Allocate(bytes);
  if (!data.ok()) return data.status();
  return std::unique_ptr<Buffer>(new CudaBuffer(allocator_, *data, bytes));
}

MemoryStats CudaBackend::memory_stats() const {
  const CudaAllocatorStats stats = allocator_->stats();
  MemoryStats memory;
  memory.current_bytes = stats.current_bytes;
  memory.peak_bytes = stats.peak_bytes;
  memory.reserved_bytes = stats.reserved_bytes;
  memory.device_total_bytes = stats.device_total_bytes;
  return memory;
}

void CudaBackend::ResetPeakMemory() { allocator_->ResetPeak(); }

absl::StatusOr<std::unique_ptr<Event>> CudaBackend::CreateEvent() {
  CUDA_CHECK(cudaSetDevice(config_.device));
  cudaEvent_t event = nullptr;
  CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  return std::unique_ptr<Event>(new CudaEvent(event));
}

absl::Status CudaBackend::CopyToDevice(const void* host, const Tensor& device, Stream& stream) {
  if (absl::Status status = CheckCopy("CopyToDevice", host, device); !status.ok()) return status;
  if (device.numel() == 0) return absl::OkStatus();
  absl::StatusOr<cudaStream_t> cuda_stream = CudaStreamOf(stream);
  if (!cuda_stream.ok()) return cuda_stream.status();
  CUDA_CHECK(cudaMemcpyAsync(device.data, host, static_cast<size_t>(device.bytes()),
                             cudaMemcpyHostToDevice, *cuda_stream));
  // The host buffer may be reused as soon as this returns.
  CUDA_CHECK(cudaStreamSynchronize(*cuda_stream));
  return absl::OkStatus();
}

absl::Status CudaBackend::CopyToHost(const Tensor& device, void* host, Stream& stream) {
  if (absl::Status status = CheckCopy("CopyToHost", host, device); !status.ok()) return status;
  if (device.numel() == 0) return absl::OkStatus();
  absl::StatusOr<cudaStream_t> cuda_stream = CudaStreamOf(stream);
  if (!cuda_stream.ok()) return cuda_stream.status();
  CUDA_CHECK(cudaMemcpyAsync(host, device.data, static_cast<size_t>(device.bytes()),
                             cudaMemcpyDeviceToHost, *cuda_stream));
  CUDA_CHECK(cudaStreamSynchronize(*cuda_stream));
  return absl::OkStatus();
}

}  // namespace fsdpd
