#include "worker/profiler/profiling_backend.h"

#include <utility>

namespace fsdpd {
namespace {

// A copy reads and writes every byte once.
OpCost CopyCost(const Tensor& device) { return {0.0, 2.0 * static_cast<double>(device.bytes())}; }

}  // namespace

ProfilingBackend::ProfilingBackend(std::unique_ptr<Backend> inner, ProfileRecorder* recorder)
    : inner_(std::move(inner)),
      recorder_(recorder),
      ops_(&inner_->ops(), recorder, &inner_->comm_stream()) {}

absl::Status ProfilingBackend::CopyToDevice(const void* host, const Tensor& device,
                                            Stream& stream) {
  if (!recorder_->active()) return inner_->CopyToDevice(host, device, stream);
  const double start = ProfileRecorder::Now();
  absl::Status status = inner_->CopyToDevice(host, device, stream);
  const double end = ProfileRecorder::Now();
  const OpCost cost = CopyCost(device);
  if (status.ok()) {
    recorder_->RecordOp(
        "memcpy_host_to_device",
        &stream == &inner_->comm_stream() ? ProfileLane::kComm : ProfileLane::kCompute, start,
        end - start, &cost, device.Describe());
  }
  return status;
}

absl::Status ProfilingBackend::CopyToHost(const Tensor& device, void* host, Stream& stream) {
  if (!recorder_->active()) return inner_->CopyToHost(device, host, stream);
  const double start = ProfileRecorder::Now();
  absl::Status status = inner_->CopyToHost(device, host, stream);
  const double end = ProfileRecorder::Now();
  const OpCost cost = CopyCost(device);
  if (status.ok()) {
    recorder_->RecordOp(
        "memcpy_device_to_host",
        &stream == &inner_->comm_stream() ? ProfileLane::kComm : ProfileLane::kCompute, start,
        end - start, &cost, device.Describe());
  }
  return status;
}

}  // namespace fsdpd
