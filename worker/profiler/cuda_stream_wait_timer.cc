#include "worker/profiler/cuda_stream_wait_timer.h"

#include <cuda_runtime_api.h>

#include <deque>
#include <mutex>
#include <vector>

#include "base/cuda_check.h"
#include "worker/backend/cuda_backend.h"

namespace fsdpd {
namespace {

class CudaStreamWaitTimer : public StreamWaitTimer {
 public:
  ~CudaStreamWaitTimer() override {
    for (const Pair& pair : pending_) {
      cudaEventDestroy(pair.before);
      cudaEventDestroy(pair.after);
    }
    for (cudaEvent_t event : free_) cudaEventDestroy(event);
  }

  absl::Status Before(Stream& waiting) override {
    auto* stream = dynamic_cast<CudaStream*>(&waiting);
    if (stream == nullptr) return absl::InvalidArgumentError("not a CUDA stream");
    std::lock_guard<std::mutex> lock(mutex_);
    cudaEvent_t before = nullptr;
    if (absl::Status taken = Take(&before); !taken.ok()) return taken;
    CUDA_CHECK(cudaEventRecord(before, stream->get()));
    open_ = before;
    return absl::OkStatus();
  }

  absl::Status After(Stream& waiting) override {
    auto* stream = dynamic_cast<CudaStream*>(&waiting);
    if (stream == nullptr) return absl::InvalidArgumentError("not a CUDA stream");
    std::lock_guard<std::mutex> lock(mutex_);
    if (open_ == nullptr) return absl::FailedPreconditionError("After without Before");
    cudaEvent_t after = nullptr;
    if (absl::Status taken = Take(&after); !taken.ok()) return taken;
    CUDA_CHECK(cudaEventRecord(after, stream->get()));
    pending_.push_back(Pair{open_, after});
    open_ = nullptr;
    return absl::OkStatus();
  }

  double total_seconds() override {
    std::lock_guard<std::mutex> lock(mutex_);
    // Brackets complete in recording order (one stream), so the first pending one that is not
    // done ends the harvest.
    while (!pending_.empty()) {
      const Pair pair = pending_.front();
      const cudaError_t done = cudaEventQuery(pair.after);
      if (done == cudaErrorNotReady) {
        // Not an error: clear it so a later launch check does not see it.
        (void)cudaGetLastError();
        break;
      }
      float milliseconds = 0.0f;
      if (done == cudaSuccess &&
          cudaEventElapsedTime(&milliseconds, pair.before, pair.after) == cudaSuccess) {
        total_seconds_ += milliseconds * 1e-3;
      }
      pending_.pop_front();
      free_.push_back(pair.before);
      free_.push_back(pair.after);
    }
    return total_seconds_;
  }

 private:
  struct Pair {
    cudaEvent_t before;
    cudaEvent_t after;
  };

  absl::Status Take(cudaEvent_t* event) {
    if (!free_.empty()) {
      *event = free_.back();
      free_.pop_back();
      return absl::OkStatus();
    }
    // Timing events (the backend's own are created without timing).
    CUDA_CHECK(cudaEventCreate(event));
    return absl::OkStatus();
  }

  std::mutex mutex_;
  std::deque<Pair> pending_;
  std::vector<cudaEvent_t> free_;
  cudaEvent_t open_ = nullptr;
  double total_seconds_ = 0.0;
};

}  // namespace

std::unique_ptr<StreamWaitTimer> CreateCudaStreamWaitTimer(Backend& backend) {
  if (dynamic_cast<CudaStream*>(&backend.compute_stream()) == nullptr) return nullptr;
  return std::make_unique<CudaStreamWaitTimer>();
}

}  // namespace fsdpd
