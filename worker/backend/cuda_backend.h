// The CUDA backend: one device, device memory through the caching allocator, two non-blocking
// streams (compute and communication), events without timing, bf16 activations, and the ops of
// kernels/cuda with cuBLASLt GEMMs.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>

#include "kernels/cuda/fp8_gemm.h"
#include "kernels/cuda/gemm.h"
#include "worker/backend/backend.h"
#include "worker/backend/checked_ops.h"
#include "worker/backend/cuda_allocator.h"
#include "worker/backend/cuda_ops.h"

namespace fsdpd {

struct CudaBackendConfig {
  int device = 0;
  // Handing out more than this fails as out of memory; 0: the device's capacity.
  int64_t memory_limit_bytes = 0;
  cuda::GemmConfig gemm;
  // Which stream's queued blocks get SMs first (bench/RESULTS.md, "The optimizer on the comm
  // stream" and "Stream priority"). kComputeFirst: a compute kernel's blocks go ahead of the
  // remaining blocks of a comm-stream kernel (the gather's cast, AdamW on the comm stream).
  // kCommFirst: the gather's cast goes ahead of the next GEMM's blocks, so it is done before
  // compute waits for it. kEqual: both at the default.
  enum class StreamPriority { kEqual, kComputeFirst, kCommFirst };
  StreamPriority stream_priority = StreamPriority::kEqual;
  // SMs left to the optimizer (FSDPD_OPTIMIZER_SMS, with the optimizer on the comm stream):
  // AdamW's kernels launch at most this many blocks, striding over the shard, and cuBLASLt plans
  // every product for the device's other SMs (GemmConfig::sm_count_target), so that the update
  // runs beside backward's GEMMs instead of taking turns with them (bench/RESULTS.md, "The
  // optimizer on the comm stream"). 0: off. From 1 to the device's SM count − 1.
  int optimizer_sms = 0;
};

// A cudaStream_t, created non-blocking so it never synchronises with the legacy default stream.
class CudaStream : public Stream {
 public:
  CudaStream(int device, cudaStream_t stream) : device_(device), stream_(stream) {}
  ~CudaStream() override;
  absl::Status Synchronize() override;
  cudaStream_t get() const { return stream_; }
  int device() const { return device_; }

 private:
  int device_;
  cudaStream_t stream_;
};

class CudaBackend : public Backend {
 public:
  // Selects the device, creates streams, the cuBLASLt workspace and handle.
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(const CudaBackendConfig& config);
  // Devices visible to this process; 0 when there is no driver or no device.
  static int DeviceCount();
  ~CudaBackend() override;

  std::string name() const override { return "cuda:" + std::to_string(config_.device); }
  bool runs_beside_host() const override { return true; }
  DType activation_dtype() const override { return DType::kBF16; }

  absl::StatusOr<std::unique_ptr<Buffer>> Allocate(int64_t bytes) override;
  MemoryStats memory_stats() const override;
  void ResetPeakMemory() override;

  Stream& compute_stream() override { return *compute_stream_; }
  Stream& comm_stream() override { return *comm_stream_; }
  absl::StatusOr<std::unique_ptr<Event>> CreateEvent() override;

  Ops& ops() override { return *ops_; }
  cuda::Gemm& gemm() { return *gemm_; }
  CudaAllocator& allocator() { return *allocator_; }

  absl::Status CopyToDevice(const void* host, const Tensor& device, Stream& stream) override;
  absl::Status CopyToHost(const Tensor& device, void* host, Stream& stream) override;

 private:
  explicit CudaBackend(const CudaBackendConfig& config);

  CudaBackendConfig config_;
  // Shared with every live buffer, so a buffer may safely outlive the backend.
  std::shared_ptr<CudaAllocator> allocator_;
  std::unique_ptr<CudaStream> compute_stream_;
  std::unique_ptr<CudaStream> comm_stream_;
  std::unique_ptr<Buffer> gemm_workspace_;
  std::unique_ptr<cuda::Gemm> gemm_;
  std::unique_ptr<cuda::Fp8Gemm> fp8_gemm_;  // null without FP8 tensor cores
  // CudaOps behind the shared contract checks.
  std::unique_ptr<CheckedOps> ops_;
};

}  // namespace fsdpd
