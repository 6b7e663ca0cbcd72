// What the model, FSDP and the trainer need from a device: memory, streams, events, ops and
// collectives. Written once against this interface; implemented by the CPU backend
// (worker/backend/cpu_backend.*) and the CUDA backend (worker/backend/cuda_backend.*).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/backend/ops.h"
#include "worker/backend/tensor.h"

namespace fsdpd {

// An ordered queue of work. On CUDA a cudaStream_t; on CPU work may run inline or on a
// thread of its own, but always in submission order.
class Stream {
 public:
  virtual ~Stream() = default;
  virtual absl::Status Synchronize() = 0;
};

// Marks a point in a stream that another stream can wait for without a host sync.
class Event {
 public:
  virtual ~Event() = default;
  virtual absl::Status Record(Stream& stream) = 0;
  virtual absl::Status WaitOn(Stream& waiting_stream) = 0;  // stream-side wait
  virtual absl::Status Synchronize() = 0;                   // host-side wait
};

// Device memory owned by the backend's caching allocator; freed on destruction.
class Buffer {
 public:
  virtual ~Buffer() = default;
  virtual void* data() const = 0;
  virtual int64_t bytes() const = 0;
  Tensor View(DType dtype, std::vector<int64_t> shape, int64_t byte_offset = 0) const {
    return Tensor{static_cast<char*>(data()) + byte_offset, dtype, std::move(shape)};
  }
};

struct MemoryStats {
  int64_t current_bytes = 0;
  int64_t peak_bytes = 0;
  int64_t reserved_bytes = 0;      // held from the device: in use plus the allocator's cache
  int64_t device_total_bytes = 0;  // 0 where unknown
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;        // "cpu" or "cuda:0"
  virtual DType activation_dtype() const = 0;  // kF32 on CPU, kBF16 on CUDA
  // Whether queued work runs on a device while the host goes on (CUDA), rather than inline on
  // the host's own threads (CPU): host work can hide behind a step only where it does.
  virtual bool runs_beside_host() const { return false; }

  // A failed allocation is an error with a message (size, current, peak), never a crash.
  virtual absl::StatusOr<std::unique_ptr<Buffer>> Allocate(int64_t bytes) = 0;
  virtual MemoryStats memory_stats() const = 0;
  virtual void ResetPeakMemory() = 0;

  virtual Stream& compute_stream() = 0;
  virtual Stream& comm_stream() = 0;
  virtual absl::StatusOr<std::unique_ptr<Event>> CreateEvent() = 0;

  virtual Ops& ops() = 0;

  // Host ↔ device copies (synchronous with respect to the host).
  virtual absl::Status CopyToDevice(const void* host, const Tensor& device, Stream& stream) = 0;
  virtual absl::Status CopyToHost(const Tensor& device, void* host, Stream& stream) = 0;
};

}  // namespace fsdpd
