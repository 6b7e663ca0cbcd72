// A Backend decorator whose ops() is a ProfilingOps over the wrapped backend's ops, and whose
// host↔device copies are recorded too; everything else forwards. Installed for every run, so a
// profiling window can open at any step; outside a window it costs one branch per op.
#pragma once

#include <memory>
#include <string>

#include "worker/backend/backend.h"
#include "worker/profiler/profile_recorder.h"
#include "worker/profiler/profiling_ops.h"

namespace fsdpd {

class ProfilingBackend : public Backend {
 public:
  ProfilingBackend(std::unique_ptr<Backend> inner, ProfileRecorder* recorder);

  Backend& inner() { return *inner_; }

  std::string name() const override { return inner_->name(); }
  DType activation_dtype() const override { return inner_->activation_dtype(); }
  absl::StatusOr<std::unique_ptr<Buffer>> Allocate(int64_t bytes) override {
    return inner_->Allocate(bytes);
  }
  MemoryStats memory_stats() const override { return inner_->memory_stats(); }
  void ResetPeakMemory() override { inner_->ResetPeakMemory(); }
  Stream& compute_stream() override { return inner_->compute_stream(); }
  Stream& comm_stream() override { return inner_->comm_stream(); }
  absl::StatusOr<std::unique_ptr<Event>> CreateEvent() override { return inner_->CreateEvent(); }
  Ops& ops() override { return ops_; }
  absl::Status CopyToDevice(const void* host, const Tensor& device, Stream& stream) override;
  absl::Status CopyToHost(const Tensor& device, void* host, Stream& stream) override;

 private:
  std::unique_ptr<Backend> inner_;
  ProfileRecorder* recorder_;
  ProfilingOps ops_;
};

}  // namespace fsdpd
