// A Backend decorator whose ops() is a ProfilingOps over the wrapped backend's ops, and whose
// host↔device copies are recorded too; everything else forwards. Installed for every run, so a
// profiling window can open at any step; outside a window it costs one branch per op.
//
// Given a StreamWaitTimer (the device runtime makes one for an asynchronous backend,
// worker/device/device_runtime.h) it also measures exposed communication on the device, every
// step: its events remember the stream they were recorded on, and each wait of the compute
// stream on a comm-stream event is bracketed by the timer.
#pragma once

#include <memory>
#include <string>

#include "worker/backend/backend.h"
#include "worker/profiler/profile_recorder.h"
#include "worker/profiler/profiling_ops.h"

namespace fsdpd {

// Times how long a stream stands still in waits, on the device: Before and After bracket one
// wait on `waiting`; completed brackets are summed without blocking the host.
class StreamWaitTimer {
 public:
  virtual ~StreamWaitTimer() = default;
  virtual absl::Status Before(Stream& waiting) = 0;
  virtual absl::Status After(Stream& waiting) = 0;
  // Seconds of every bracket that has completed on the device so far.
  virtual double total_seconds() = 0;
};

class ProfilingBackend : public Backend {
 public:
  // `timer` null: waits are not timed on the device (a synchronous backend's waits block the
  // host, where the communicator times them).
  ProfilingBackend(std::unique_ptr<Backend> inner, ProfileRecorder* recorder,
                   std::unique_ptr<StreamWaitTimer> timer = nullptr);

  Backend& inner() { return *inner_; }
  // Device time the compute stream has waited on comm-stream events; 0 without a timer.
  double stream_wait_seconds() const { return timer_ != nullptr ? timer_->total_seconds() : 0.0; }
  void set_stream_wait_timer(std::unique_ptr<StreamWaitTimer> timer) { timer_ = std::move(timer); }

  std::string name() const override { return inner_->name(); }
  DType activation_dtype() const override { return inner_->activation_dtype(); }
  // Forwarded like every other property: the trainer reads the next batch ahead only where the
  // backend it holds (this decorator) says the device runs beside the host.
  bool runs_beside_host() const override { return inner_->runs_beside_host(); }
  absl::StatusOr<std::unique_ptr<Buffer>> Allocate(int64_t bytes) override {
    return inner_->Allocate(bytes);
  }
  MemoryStats memory_stats() const override { return inner_->memory_stats(); }
  void ResetPeakMemory() override { inner_->ResetPeakMemory(); }
  Stream& compute_stream() override { return inner_->compute_stream(); }
  Stream& comm_stream() override { return inner_->comm_stream(); }
  absl::StatusOr<std::unique_ptr<Event>> CreateEvent() override;
  Ops& ops() override { return ops_; }
  absl::Status CopyToDevice(const void* host, const Tensor& device, Stream& stream) override;
  absl::Status CopyToHost(const Tensor& device, void* host, Stream& stream) override;

 private:
  std::unique_ptr<Backend> inner_;
  ProfileRecorder* recorder_;
  ProfilingOps ops_;
  std::unique_ptr<StreamWaitTimer> timer_;
};

}  // namespace fsdpd
