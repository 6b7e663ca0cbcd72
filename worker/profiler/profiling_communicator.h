// A Communicator decorator that records every collective during a profiling window, on the
// comm lane and in phase "comm", attributed to the current unit; everything else forwards.
// Collectives carry the bytes of their full buffer but no FLOP count, so the kernel table
// shows their time without a compute/memory verdict.
#pragma once

#include <memory>

#include "worker/comm/communicator.h"
#include "worker/profiler/profile_recorder.h"

namespace fsdpd {

class ProfilingCommunicator : public Communicator {
 public:
  ProfilingCommunicator(std::unique_ptr<Communicator> inner, ProfileRecorder* recorder)
      : inner_(std::move(inner)), recorder_(recorder) {}

  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  absl::Status AllGather(const Tensor& shard, const Tensor& full, Stream& stream) override;
  absl::Status ReduceScatter(const Tensor& full, const Tensor& shard, ReduceOp op,
                             Stream& stream) override;
  absl::Status AllReduce(const Tensor& values, ReduceOp op, Stream& stream) override;
  absl::Status Barrier() override;
  void Abort() override { inner_->Abort(); }
  CommunicatorStats stats() const override { return inner_->stats(); }

 private:
  template <typename Call>
  absl::Status Run(const char* name, const Tensor* full, Call call) {
    if (!recorder_->active()) return call();
    const double start = ProfileRecorder::Now();
    absl::Status status = call();
    const double end = ProfileRecorder::Now();
    if (status.ok()) {
      const OpCost cost{-1.0, full != nullptr ? static_cast<double>(full->bytes()) : 0.0};
      recorder_->RecordOp(name, ProfileLane::kComm, start, end - start, &cost,
                          full != nullptr ? full->Describe() : "", kPhaseComm);
    }
    return status;
  }

  std::unique_ptr<Communicator> inner_;
  ProfileRecorder* recorder_;
};

}  // namespace fsdpd
