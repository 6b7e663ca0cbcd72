// The communicator of a world of one rank: every collective is a local copy, so a single-rank
// job needs no rendezvous store, no network and, on a GPU, no NCCL (whose communicator and
// kernels take device memory a one-rank job has no use for). Trusts the collective contract,
// which CheckedCommunicator (worker/comm/checked_communicator.h) checks in front of it.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <utility>

#include "worker/comm/communicator.h"

namespace fsdpd {

// Copies src into dst (same dtype and size, distinct memory), queued on `stream`.
using StreamCopy =
    std::function<absl::Status(const Tensor& src, const Tensor& dst, Stream& stream)>;

class LocalCommunicator : public Communicator {
 public:
  // Without `device_copy`, host tensors: the stream is synchronised and the copy made at once.
  // With it, device tensors: copies are queued on the collective's stream through
  // `device_copy`, and an all-reduce (the identity over one rank) queues nothing. The
  // communicator comes behind CheckedCommunicator.
  static std::unique_ptr<Communicator> Create(StreamCopy device_copy = nullptr);

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
  explicit LocalCommunicator(StreamCopy device_copy) : device_copy_(std::move(device_copy)) {}

  // Copies src into dst in the order of `stream`, through device_copy_ where there is one.
  absl::Status Copy(const Tensor& src, const Tensor& dst, Stream& stream);

  StreamCopy device_copy_;
  std::atomic<bool> aborted_{false};
};

}  // namespace fsdpd
