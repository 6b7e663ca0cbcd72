// Collectives among the ranks of one attempt. All collective traffic of the engine goes through
// this interface (docs/architecture.md: all NCCL/Gloo use lives in worker/comm/). Every rank must
// issue the same collectives in the same order. Operations are enqueued on `stream` after the work
// that is already there; on the CPU backend streams run inline, so a call returns once its result
// is in place. A dead or stuck peer yields an error after the configured timeout, never a hang.
//
// The contract of each collective's arguments below is checked once, for every communicator, by
// CheckedCommunicator (worker/comm/checked_communicator.h), in front of which every factory
// hands its communicator out; a call that breaks it is INVALID_ARGUMENT and moves nothing. Every
// tensor has no negative dimension and data unless it is empty.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/backend/backend.h"
#include "worker/comm/key_value_store.h"

namespace fsdpd {

enum class ReduceOp { kSum, kAverage, kMax, kMin };

// Where a rank spends its time in collectives; the trainer reports it as exposed
// communication.
struct CommunicatorStats {
  // Host time blocked in collectives, plus, on an asynchronous backend, stream_wait_seconds.
  double blocked_seconds = 0.0;
  // Device time the compute stream stood waiting for the comm stream (CUDA events around each
  // wait, read without a host sync once they completed); 0 where streams run inline.
  double stream_wait_seconds = 0.0;
  int64_t operations = 0;
  int64_t bytes_sent = 0;  // an estimate: the bytes this rank contributes to each collective
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;

  // full = concat over ranks of each rank's shard, in rank order. Any dtype, the same for both;
  // shard.numel()·world_size = full.numel(). In place when shard is exactly this rank's slice
  // of full; otherwise shard shares no byte with full.
  virtual absl::Status AllGather(const Tensor& shard, const Tensor& full, Stream& stream) = 0;

  // shard = op over ranks of this rank's slice of full. Both fp32: the engine reduces gradients
  // in fp32 (parallel.reduce_dtype, whose only accepted value is fp32), on every communicator,
  // NCCL included. kSum or kAverage; shard.numel()·world_size = full.numel(); shard shares no
  // byte with full, which is left unchanged.
  virtual absl::Status ReduceScatter(const Tensor& full, const Tensor& shard, ReduceOp op,
                                     Stream& stream) = 0;

  // In place, fp32 or int32; kAverage only of fp32 (an int32 average would truncate).
  virtual absl::Status AllReduce(const Tensor& values, ReduceOp op, Stream& stream) = 0;

  virtual absl::Status Barrier() = 0;

  // Makes every later operation fail at once with CANCELLED (the attempt is over). Safe to
  // call from another thread.
  virtual void Abort() = 0;

  virtual CommunicatorStats stats() const = 0;
};

struct CommunicatorOptions {
  int rank = 0;
  int world_size = 1;
  // The address this rank's Gloo device binds to and peers connect to.
  std::string bind_address = "127.0.0.1";
  // Bounds every collective and the initial connection; a dead peer fails the op in this time.
  std::chrono::milliseconds timeout = std::chrono::seconds(60);
};

// World size 1: a communicator that needs no store and no network. Otherwise Gloo over TCP,
// rendezvousing through `store` (already scoped to the job and attempt). Either comes behind
// CheckedCommunicator.
absl::StatusOr<std::unique_ptr<Communicator>> CreateCommunicator(const CommunicatorOptions& options,
                                                                 KeyValueStore* store);

}  // namespace fsdpd
