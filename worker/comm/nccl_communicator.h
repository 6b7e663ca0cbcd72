// Collectives over NCCL for the CUDA backend. Every operation is enqueued on the CUDA stream it
// is given (the backend's comm stream) and returns without waiting for it, so the caller orders
// compute against it with events, never host syncs.
//
// The communicator is created non-blocking (ncclConfig_t.blocking = 0) so that it can always be
// aborted: a watchdog thread polls ncclCommGetAsyncError and the completion of every enqueued
// collective, and calls ncclCommAbort when NCCL reports an error or a collective has been
// outstanding for longer than the configured timeout. A dead peer therefore fails the attempt
// within the timeout instead of hanging the rank (no 30-minute NCCL hang).
//
// Trusts the collective contract, which CheckedCommunicator (worker/comm/checked_communicator.h)
// checks in front of it.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/comm/communicator.h"
#include "worker/comm/key_value_store.h"

namespace fsdpd {

// The store key rank 0 publishes the NCCL unique id under (hex-encoded, so any store that
// keeps text can carry it). The store is already scoped to the job and attempt.
inline constexpr char kNcclUniqueIdKey[] = "nccl_unique_id";

struct NcclCommunicatorOptions {
  int rank = 0;
  int world_size = 1;
  int device = 0;  // the CUDA device of this rank (the backend's)
  // Bounds the rendezvous, the communicator's creation and every collective.
  std::chrono::milliseconds timeout = std::chrono::seconds(60);
  // How often the watchdog looks at NCCL's asynchronous error and the pending collectives.
  std::chrono::milliseconds poll_interval = std::chrono::milliseconds(50);
};

class NcclCommunicator : public Communicator {
 public:
  // Rendezvous through `store` (rank 0 creates and publishes the unique id, the others wait for
  // it), then ncclCommInitRankConfig. `store` may be null only in a world of one rank. The
  // communicator comes behind CheckedCommunicator.
  static absl::StatusOr<std::unique_ptr<Communicator>> Connect(
      const NcclCommunicatorOptions& options, KeyValueStore* store);
  ~NcclCommunicator() override;

  int rank() const override { return options_.rank; }
  int world_size() const override { return options_.world_size; }

  absl::Status AllGather(const Tensor& shard, const Tensor& full, Stream& stream) override;
  absl::Status ReduceScatter(const Tensor& full, const Tensor& shard, ReduceOp op,
                             Stream& stream) override;
  absl::Status AllReduce(const Tensor& values, ReduceOp op, Stream& stream) override;
  // Blocks the host until every rank has arrived (an all-reduce on a stream of its own).
  absl::Status Barrier() override;
  void Abort() override;
  CommunicatorStats stats() const override;

 private:
  struct Pending {
    cudaEvent_t event;  // recorded after the collective
    std::chrono::steady_clock::time_point issued;
    std::string operation;
  };

  explicit NcclCommunicator(const NcclCommunicatorOptions& options);

  // Checks that the communicator is usable; the error that ended it otherwise.
  absl::Status CheckUsable(const char* operation) const;
  // After an enqueue on the non-blocking communicator: waits (bounded) while NCCL reports the
  // call in progress, then turns its result into a Status.
  absl::Status Complete(ncclResult_t result, const char* statement, const char* file, int line);
  // Records completion of the collective just enqueued on `stream` for the watchdog.
  absl::Status Track(cudaStream_t stream, std::string operation, int64_t bytes);
  void WatchdogLoop();
  // Aborts the NCCL communicator once, keeping `reason` as the error of every later call.
  void AbortWith(absl::Status reason);
  absl::StatusOr<cudaEvent_t> AcquireEvent();  // from the pool, or a new one

  NcclCommunicatorOptions options_;
  ncclComm_t comm_ = nullptr;  // null after abort or destruction
  cudaStream_t barrier_stream_ = nullptr;
  int32_t* barrier_value_ = nullptr;  // one device int32

  // Serialises NCCL calls on comm_ between the training thread, Abort and the watchdog.
  mutable std::mutex comm_mutex_;
  absl::Status failure_;  // guarded by comm_mutex_; OK while usable
  std::atomic<bool> aborted_{false};

  std::mutex pending_mutex_;
  std::deque<Pending> pending_;
  std::vector<cudaEvent_t> free_events_;

  std::mutex watchdog_mutex_;
  std::condition_variable watchdog_wakeup_;
  bool stopping_ = false;
  std::thread watchdog_;

  std::atomic<int64_t> operations_{0};
  std::atomic<int64_t> bytes_sent_{0};
  std::atomic<int64_t> blocked_nanoseconds_{0};
};

}  // namespace fsdpd
