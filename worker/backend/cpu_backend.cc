#include "worker/backend/cpu_backend.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace fsdpd {
namespace {

// Cache-line alignment suits the vectorised loops and BLAS.
constexpr int64_t kAlignment = 64;

class CpuBuffer : public Buffer {
 public:
  CpuBuffer(std::shared_ptr<CpuBackend::MemoryCounters> counters, void* data, int64_t bytes,
            int64_t charged_bytes)
      : counters_(std::move(counters)), data_(data), bytes_(bytes), charged_bytes_(charged_bytes) {}
  ~CpuBuffer() override {
    std::free(data_);
    counters_->current_bytes.fetch_sub(charged_bytes_);
  }
  void* data() const override { return data_; }
  int64_t bytes() const override { return bytes_; }

 private:
  std::shared_ptr<CpuBackend::MemoryCounters> counters_;
  void* data_;
  int64_t bytes_;
  int64_t charged_bytes_;
};

// Work on the CPU has already finished by the time it is recorded.
class CompletedEvent : public Event {
 public:
  absl::Status Record(Stream&) override { return absl::OkStatus(); }
  absl::Status WaitOn(Stream&) override { return absl::OkStatus(); }
  absl::Status Synchronize() override { return absl::OkStatus(); }
};

std::string Megabytes(int64_t bytes) {
  return absl::StrCat(bytes, " bytes (", bytes / (1024 * 1024), " MiB)");
}

}  // namespace

class CpuBackend::InlineStream : public Stream {
 public:
  absl::Status Synchronize() override { return absl::OkStatus(); }
};

CpuBackend::CpuBackend(CpuBackendConfig config)
    : config_(config),
      counters_(std::make_shared<MemoryCounters>()),
      compute_stream_(std::make_unique<InlineStream>()),
      comm_stream_(std::make_unique<InlineStream>()) {}

CpuBackend::~CpuBackend() = default;

absl::StatusOr<std::unique_ptr<Buffer>> CpuBackend::Allocate(int64_t bytes) {
  if (bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat("cannot allocate a negative size: ", bytes));
  }
  // aligned_alloc needs a non-zero multiple of the alignment.
  const int64_t charged =
      std::max<int64_t>(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
  const int64_t before = counters_->current_bytes.fetch_add(charged);
  if (config_.memory_limit_bytes > 0 && before + charged > config_.memory_limit_bytes) {
    counters_->current_bytes.fetch_sub(charged);
    return absl::ResourceExhaustedError(
        absl::StrCat("cpu: allocating ", Megabytes(bytes), " would exceed the memory limit of ",
                     Megabytes(config_.memory_limit_bytes), " (in use ", Megabytes(before),
                     ", peak ", Megabytes(counters_->peak_bytes.load()), ")"));
  }
  void* data = std::aligned_alloc(kAlignment, static_cast<size_t>(charged));
  if (data == nullptr) {
    counters_->current_bytes.fetch_sub(charged);
    return absl::ResourceExhaustedError(
        absl::StrCat("cpu: out of host memory allocating ", Megabytes(bytes), " (in use ",
                     Megabytes(before), ", peak ", Megabytes(counters_->peak_bytes.load()), ")"));
  }
  const int64_t now = before + charged;
  int64_t peak = counters_->peak_bytes.load();
  while (now > peak && !counters_->peak_bytes.compare_exchange_weak(peak, now)) {
    // peak now holds the latest value; retry until ours is recorded or a larger one is.
  }
  return std::unique_ptr<Buffer>(new CpuBuffer(counters_, data, bytes, charged));
}

MemoryStats CpuBackend::memory_stats() const {
  MemoryStats stats;
  stats.current_bytes = counters_->current_bytes.load();
  stats.peak_bytes = counters_->peak_bytes.load();
  stats.reserved_bytes = stats.current_bytes;  // freed memory goes straight back
  stats.device_total_bytes = config_.memory_limit_bytes;
  return stats;
}

void CpuBackend::ResetPeakMemory() { counters_->peak_bytes.store(counters_->current_bytes.load()); }

Stream& CpuBackend::compute_stream() { return *compute_stream_; }
Stream& CpuBackend::comm_stream() { return *comm_stream_; }

absl::StatusOr<std::unique_ptr<Event>> CpuBackend::CreateEvent() {
  return std::unique_ptr<Event>(new CompletedEvent());
}

absl::Status CpuBackend::CopyToDevice(const void* host, const Tensor& device, Stream&) {
  if (device.numel() > 0 && (host == nullptr || device.data == nullptr)) {
    return absl::InvalidArgumentError(
        absl::StrCat("CopyToDevice: null pointer copying into ", device.Describe()));
  }
  if (device.numel() > 0) std::memcpy(device.data, host, static_cast<size_t>(device.bytes()));
  return absl::OkStatus();
}

absl::Status CpuBackend::CopyToHost(const Tensor& device, void* host, Stream&) {
  if (device.numel() > 0 && (host == nullptr || device.data == nullptr)) {
    return absl::InvalidArgumentError(
        absl::StrCat("CopyToHost: null pointer copying from ", device.Describe()));
  }
  if (device.numel() > 0) std::memcpy(host, device.data, static_cast<size_t>(device.bytes()));
  return absl::OkStatus();
}

}  // namespace fsdpd
