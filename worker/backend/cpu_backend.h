// The CPU backend: host memory through a tracking allocator, streams that run work inline in
// submission order, events that are complete as soon as they are recorded, and the fp32
// reference ops. It is what CI and the demo train on, and the oracle for the CUDA backend.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "worker/backend/backend.h"
#include "worker/backend/checked_ops.h"
#include "worker/backend/cpu_ops.h"

namespace fsdpd {

struct CpuBackendConfig {
  // Allocations that would take the live total above this fail with RESOURCE_EXHAUSTED;
  // 0 means no limit beyond what the host can give.
  int64_t memory_limit_bytes = 0;
};

class CpuBackend : public Backend {
 public:
  explicit CpuBackend(CpuBackendConfig config = {});
  ~CpuBackend() override;

  std::string name() const override { return "cpu"; }
  DType activation_dtype() const override { return DType::kF32; }

  absl::StatusOr<std::unique_ptr<Buffer>> Allocate(int64_t bytes) override;
  MemoryStats memory_stats() const override;
  void ResetPeakMemory() override;

  Stream& compute_stream() override;
  Stream& comm_stream() override;
  absl::StatusOr<std::unique_ptr<Event>> CreateEvent() override;

  Ops& ops() override { return ops_; }

  absl::Status CopyToDevice(const void* host, const Tensor& device, Stream& stream) override;
  absl::Status CopyToHost(const Tensor& device, void* host, Stream& stream) override;

  // Shared with every live buffer, so a buffer may safely outlive the backend.
  struct MemoryCounters {
    std::atomic<int64_t> current_bytes{0};
    std::atomic<int64_t> peak_bytes{0};
  };

 private:
  class InlineStream;

  CpuBackendConfig config_;
  std::shared_ptr<MemoryCounters> counters_;
  std::unique_ptr<InlineStream> compute_stream_;
  std::unique_ptr<InlineStream> comm_stream_;
  // CpuOps behind the shared contract checks.
  CheckedOps ops_{std::make_unique<CpuOps>()};
};

}  // namespace fsdpd
