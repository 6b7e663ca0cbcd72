// A Communicator decorator that checks the collective contract (worker/comm/communicator.h)
// once, for every communicator, before forwarding: tensors present with no negative dimension,
// the dtypes the contract fixes (a reduce-scatter reduces f32; an all-reduce takes f32 or i32,
// and averages only f32; an all-gather keeps one dtype), the reduce ops each collective takes,
// element counts that fit the world size (shard × world size = full), and aliasing (a gather's
// shard is exactly this rank's slice of full or shares no byte with it; a reduce-scatter's shard
// shares no byte with full). Every factory in worker/comm hands out its communicator behind this
// one (LocalCommunicator::Create, GlooCommunicator::Connect, HostStagedCommunicator::Connect,
// NcclCommunicator::Connect, CreateCommunicator), so the communicators keep only what is theirs:
// moving the bytes, their timeouts and aborts. Each refusal is INVALID_ARGUMENT naming the
// collective, the argument and its shape, and nothing reaches the inner communicator.
#pragma once

#include <memory>

#include "worker/comm/communicator.h"

namespace fsdpd {

class CheckedCommunicator : public Communicator {
 public:
  explicit CheckedCommunicator(std::unique_ptr<Communicator> inner) : inner_(std::move(inner)) {}

  // The communicator behind the check, unchecked.
  Communicator& inner() { return *inner_; }

  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  absl::Status AllGather(const Tensor& shard, const Tensor& full, Stream& stream) override;
  absl::Status ReduceScatter(const Tensor& full, const Tensor& shard, ReduceOp op,
                             Stream& stream) override;
  absl::Status AllReduce(const Tensor& values, ReduceOp op, Stream& stream) override;
  absl::Status Barrier() override { return inner_->Barrier(); }
  void Abort() override { inner_->Abort(); }
  CommunicatorStats stats() const override { return inner_->stats(); }

 private:
  std::unique_ptr<Communicator> inner_;
};

// Puts `inner` behind the contract check.
std::unique_ptr<Communicator> Checked(std::unique_ptr<Communicator> inner);

// "sum", "average", "max" or "min", for messages.
const char* ReduceOpName(ReduceOp op);

}  // namespace fsdpd
