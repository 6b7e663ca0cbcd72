// A caching allocator for device memory. cudaMalloc and cudaFree synchronise the device and
// cost tens of microseconds, so freed blocks are kept in free lists by size class and handed
// out again. On a miss it calls cudaMalloc; when that runs out of memory it returns every
// cached block to the driver and tries once more; only then does it fail, with a
// RESOURCE_EXHAUSTED status naming the requested, current, cached and peak bytes.
//
// Blocks are not tied to streams: a block freed while kernels on one stream still use it may be
// handed to the next caller at once. That is safe for work ordered on the same stream (the
// common case: activations on the compute stream); memory shared with another stream must be
// kept alive, or that stream synchronised, until its work is done.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/status/statusor.h"

namespace fsdpd {

struct CudaAllocatorConfig {
  int device = 0;
  // Handing out more than this many bytes at once fails as if the device were full; 0 means
  // only the device's own capacity limits it (useful to test out-of-memory paths).
  int64_t memory_limit_bytes = 0;
};

struct CudaAllocatorStats {
  int64_t current_bytes = 0;   // handed out now, rounded to size classes
  int64_t peak_bytes = 0;      // highest current_bytes since creation or ResetPeak
  int64_t cached_bytes = 0;    // freed, kept for reuse
  int64_t reserved_bytes = 0;  // obtained from cudaMalloc: current + cached
  int64_t device_total_bytes = 0;
};

class CudaAllocator {
 public:
  explicit CudaAllocator(CudaAllocatorConfig config);
  ~CudaAllocator();  // returns every cached block; blocks still handed out must be freed first
  CudaAllocator(const CudaAllocator&) = delete;
  CudaAllocator& operator=(const CudaAllocator&) = delete;

  // A block of at least `bytes` (256-byte aligned); 0 bytes gives a small valid block.
  absl::StatusOr<void*> Allocate(int64_t bytes);
  // Returns a block from Allocate to the cache.
  void Free(void* pointer);
  // Gives every cached block back to the driver.
  void ReleaseCached();

  CudaAllocatorStats stats() const;
  void ResetPeak();

  // The size class a request of `bytes` is served from.
  static int64_t RoundedSize(int64_t bytes);

 private:
  absl::StatusOr<void*> AllocateFromDriver(int64_t rounded, int64_t requested);
  void ReleaseCachedLocked();

  CudaAllocatorConfig config_;
  mutable std::mutex mutex_;
  std::multimap<int64_t, void*> free_blocks_;  // by size, for best fit
  std::map<void*, int64_t> live_blocks_;       // handed out, with their sizes
  int64_t current_bytes_ = 0;
  int64_t peak_bytes_ = 0;
  int64_t cached_bytes_ = 0;
  int64_t device_total_bytes_ = 0;
};

}  // namespace fsdpd
