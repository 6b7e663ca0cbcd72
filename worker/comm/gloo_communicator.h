// Collectives over Gloo's TCP transport for the CPU backend. Ranks rendezvous through a
// KeyValueStore (worker/comm/mesh_exchange.h); all-gather and all-reduce use
// Gloo's algorithms, reduce-scatter is a ring over Gloo's unbound buffers, since Gloo's only
// reduce-scatter (halving-doubling) needs per-call pair setup. Every operation is bounded by the
// timeout, so a dead peer is an error, never a hang. Trusts the collective contract, which
// CheckedCommunicator (worker/comm/checked_communicator.h) checks in front of it.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "gloo/context.h"
#include "worker/comm/communicator.h"

namespace fsdpd {

class GlooCommunicator : public Communicator {
 public:
  // Connects to the other ranks through `store`; the communicator comes behind
  // CheckedCommunicator.
  static absl::StatusOr<std::unique_ptr<Communicator>> Connect(const CommunicatorOptions& options,
                                                               KeyValueStore* store);

  int rank() const override { return options_.rank; }
  int world_size() const override { return options_.world_size; }
  absl::Status AllGather(const Tensor& shard, const Tensor& full, Stream& stream) override;
  absl::Status ReduceScatter(const Tensor& full, const Tensor& shard, ReduceOp op,
                             Stream& stream) override;
  absl::Status AllReduce(const Tensor& values, ReduceOp op, Stream& stream) override;
  absl::Status Barrier() override;
  void Abort() override;
  CommunicatorStats stats() const override;

 private:
  // HostStagedCommunicator runs on the unchecked communicator: it is checked in front of itself.
  friend class HostStagedCommunicator;
  static absl::StatusOr<std::unique_ptr<GlooCommunicator>> ConnectUnchecked(
      const CommunicatorOptions& options, KeyValueStore* store);
  GlooCommunicator(const CommunicatorOptions& options, std::shared_ptr<gloo::Context> context)
      : options_(options), context_(std::move(context)) {}

  // Runs one collective: checks for an abort, times it, and turns Gloo's exceptions into a
  // Status naming the operation and this rank.
  template <typename Body>
  absl::Status Run(const char* operation, int64_t bytes, Body&& body);
  void RingReduceScatter(const float* full, float* shard, int64_t shard_numel);

  CommunicatorOptions options_;
  std::shared_ptr<gloo::Context> context_;
  std::atomic<bool> aborted_{false};
  uint32_t next_tag_ = 0;
  std::vector<float> receive_scratch_;
  mutable std::mutex stats_mutex_;
  CommunicatorStats stats_;
};

}  // namespace fsdpd
