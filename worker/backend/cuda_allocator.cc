#include "worker/backend/cuda_allocator.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace fsdpd {
namespace {

// Small requests are rounded to 512 bytes; larger ones to 2 MiB, the driver's own granularity,
// so that a large block freed by one layer fits the same request from the next.
constexpr int64_t kSmallLimit = 1 << 20;
constexpr int64_t kSmallRounding = 512;
constexpr int64_t kLargeRounding = 2 << 20;
// A cached large block serves a request only if it wastes at most this fraction of itself.
constexpr double kMaxWaste = 0.25;

std::string Bytes(int64_t bytes) {
  return absl::StrCat(bytes, " bytes (", bytes / (1024 * 1024), " MiB)");
}

}  // namespace

CudaAllocator::CudaAllocator(CudaAllocatorConfig config) : config_(config) {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  int previous = 0;
  if (cudaGetDevice(&previous) == cudaSuccess && cudaSetDevice(config_.device) == cudaSuccess &&
      cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
    device_total_bytes_ = static_cast<int64_t>(total_bytes);
    cudaSetDevice(previous);
  }
  cudaGetLastError();  // a failed probe leaves no sticky error behind
}

CudaAllocator::~CudaAllocator() {
  std::lock_guard<std::mutex> lock(mutex_);
  ReleaseCachedLocked();
  if (!live_blocks_.empty()) {
    spdlog::warn("CudaAllocator destroyed with {} blocks ({} bytes) still in use",
                 live_blocks_.size(), current_bytes_);
  }
}

int64_t CudaAllocator::RoundedSize(int64_t bytes) {
  if (bytes <= 0) return kSmallRounding;
  const int64_t rounding = bytes <= kSmallLimit ? kSmallRounding : kLargeRounding;
  return (bytes + rounding - 1) / rounding * rounding;
}

absl::StatusOr<void*> CudaAllocator::Allocate(int64_t bytes) {
  if (bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda:", config_.device, ": cannot allocate a negative size: ", bytes));
  }
  const int64_t rounded = RoundedSize(bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  if (config_.memory_limit_bytes > 0 && current_bytes_ + rounded > config_.memory_limit_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cuda:", config_.device, ": allocating ", Bytes(bytes),
                     " would exceed the limit of ", Bytes(config_.memory_limit_bytes), " (in use ",
                     Bytes(current_bytes_), ", peak ", Bytes(peak_bytes_), ")"));
  }
  void* pointer = nullptr;
  int64_t block_bytes = rounded;
  auto found = free_blocks_.lower_bound(rounded);
  const bool fits = found != free_blocks_.end() &&
                    (rounded <= kSmallLimit ? found->first == rounded
                                            : found->first - rounded <= found->first * kMaxWaste);
  if (fits) {
    pointer = found->second;
    block_bytes = found->first;
    cached_bytes_ -= block_bytes;
    free_blocks_.erase(found);
  } else {
    absl::StatusOr<void*> fresh = AllocateFromDriver(rounded, bytes);
    if (!fresh.ok()) return fresh.status();
    pointer = *fresh;
  }
  live_blocks_[pointer] = block_bytes;
  current_bytes_ += block_bytes;
  peak_bytes_ = std::max(peak_bytes_, current_bytes_);
  return pointer;
}

absl::StatusOr<void*> CudaAllocator::AllocateFromDriver(int64_t rounded, int64_t requested) {
  int previous = 0;
  cudaGetDevice(&previous);
  cudaSetDevice(config_.device);
  void* pointer = nullptr;
  cudaError_t error = cudaMalloc(&pointer, static_cast<size_t>(rounded));
  if (error == cudaErrorMemoryAllocation && cached_bytes_ > 0) {
    cudaGetLastError();  // clear the error before retrying
    spdlog::info("cuda:{}: out of memory for {} bytes; releasing {} cached bytes and retrying",
                 config_.device, rounded, cached_bytes_);
    ReleaseCachedLocked();
    error = cudaMalloc(&pointer, static_cast<size_t>(rounded));
  }
  cudaSetDevice(previous);
  if (error != cudaSuccess) {
    cudaGetLastError();
    const std::string detail =
        absl::StrCat("cuda:", config_.device, ": cudaMalloc of ", Bytes(requested), " (size class ",
                     Bytes(rounded), ") failed: ", cudaGetErrorString(error), "; in use ",
                     Bytes(current_bytes_), ", peak ", Bytes(peak_bytes_), ", cached ",
                     Bytes(cached_bytes_), ", device total ", Bytes(device_total_bytes_));
    if (error == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError(detail);
    return absl::InternalError(detail);
  }
  return pointer;
}

void CudaAllocator::Free(void* pointer) {
  if (pointer == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto live = live_blocks_.find(pointer);
  if (live == live_blocks_.end()) {
    spdlog::error("CudaAllocator::Free: {} was not allocated here; ignored", pointer);
    return;
  }
  current_bytes_ -= live->second;
  cached_bytes_ += live->second;
  free_blocks_.emplace(live->second, pointer);
  live_blocks_.erase(live);
}

void CudaAllocator::ReleaseCached() {
  std::lock_guard<std::mutex> lock(mutex_);
  ReleaseCachedLocked();
}

void CudaAllocator::ReleaseCachedLocked() {
  if (free_blocks_.empty()) return;
  int previous = 0;
  cudaGetDevice(&previous);
  cudaSetDevice(config_.device);
  for (const auto& [size, pointer] : free_blocks_) {
    const cudaError_t error = cudaFree(pointer);
    if (error != cudaSuccess) {
      spdlog::warn("cuda:{}: cudaFree of a cached block failed: {}", config_.device,
                   cudaGetErrorString(error));
    }
  }
  free_blocks_.clear();
  cached_bytes_ = 0;
  cudaSetDevice(previous);
}

CudaAllocatorStats CudaAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  CudaAllocatorStats stats;
  stats.current_bytes = current_bytes_;
  stats.peak_bytes = peak_bytes_;
  stats.cached_bytes = cached_bytes_;
  stats.reserved_bytes = current_bytes_ + cached_bytes_;
  stats.device_total_bytes = device_total_bytes_;
  return stats;
}

void CudaAllocator::ResetPeak() {
  std::lock_guard<std::mutex> lock(mutex_);
  peak_bytes_ = current_bytes_;
}

}  // namespace fsdpd
