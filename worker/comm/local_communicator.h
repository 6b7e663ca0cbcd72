// The communicator of a world of one rank: every collective is a local copy, so a single-rank
// job needs no rendezvous store and no network.
#pragma once

#include <atomic>

#include "worker/comm/communicator.h"

namespace fsdpd {

class LocalCommunicator : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  absl::Status AllGather(const Tensor& shard, const Tensor& full, Stream& stream) override;
  absl::Status ReduceScatter(const Tensor& full, const Tensor& shard, ReduceOp op,
                             Stream& stream) override;
  absl::Status AllReduce(const Tensor& values, ReduceOp op, Stream& stream) override;
  absl::Status Barrier() override;
  void Abort() override { aborted_ = true; }
  CommunicatorStats stats() const override { return {}; }

 private:
  std::atomic<bool> aborted_{false};
};

}  // namespace fsdpd
