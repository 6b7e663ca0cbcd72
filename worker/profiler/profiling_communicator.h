// A Communicator decorator that records every collective during a profiling window, on the
// comm lane and in phase "comm", attributed to the current unit; everything else forwards.
// Collectives carry the bytes of their full buffer but no FLOP count, so the kernel table
// shows their time without a compute/memory verdict.
#pragma once

#include <memory>

#include "worker/comm/communicator.h"
#include "worker/profiler/profile_recorder.h"
#include "worker/profiler/profiling_backend.h"

namespace fsdpd {

class ProfilingCommunicator : public Communicator {
 public:
  // With `backend`, stats() adds the device time the compute stream waited on the comm stream
  // (ProfilingBackend::stream_wait_seconds) to the host's blocked time: exposed communication.
  ProfilingCommunicator(std::unique_ptr<Communicator> inner, ProfileRecorder* recorder,
                        ProfilingBackend* backend = nullptr)
      : inner_(std::move(inner)), recorder_(recorder), backend_(backend) {}

  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  absl::Status AllGather(const Tensor& shard, const Tensor& full, Stream& stream) override;
  absl::Status ReduceScatter(const Tensor& full, const Tensor& shard, ReduceOp op,
                             Stream& stream) override;
  absl::Status AllReduce(const Tensor& values, ReduceOp op, Stream& stream) override;
  absl::Status Barrier() override;
  void Abort() override { inner_->Abort(); }
  CommunicatorStats stats() const override {
    CommunicatorStats stats = inner_->stats();
    if (backend_ != nullptr) {
      stats.stream_wait_seconds = backend_->stream_wait_seconds();
      stats.blocked_seconds += stats.stream_wait_seconds;
    }
    return stats;
  }

 private:
  template <typename Call>
  absl::Status Run(const char* name, const Tensor* full, Call call) {
    if (!recorder_->active()) return call();
    const double start = ProfileRecorder::Now();
    const uint64_t site = recorder_->OpenSite(name, ProfileLane::kComm, /*is_op=*/true, kPhaseComm);
    absl::Status status = call();
    recorder_->CloseSite(site);
    const double end = ProfileRecorder::Now();
    if (status.ok()) {
      const OpCost cost{-1.0, full != nullptr ? static_cast<double>(full->bytes()) : 0.0};
      recorder_->RecordOp(name, ProfileLane::kComm, start, end - start, &cost,
                          full != nullptr ? full->Describe() : "", kPhaseComm, site);
    }
    return status;
  }

  std::unique_ptr<Communicator> inner_;
  ProfileRecorder* recorder_;
  ProfilingBackend* backend_;
};

}  // namespace fsdpd
