#include "worker/profiler/profiling_backend.h"

#include <utility>

namespace fsdpd {
namespace {

// Remembers the stream it was recorded on; the compute stream's waits on a comm-stream record
// are bracketed by the timer.
class WaitTimedEvent : public Event {
 public:
  WaitTimedEvent(std::unique_ptr<Event> inner, StreamWaitTimer* timer, const Stream* compute,
                 const Stream* comm)
      : inner_(std::move(inner)), timer_(timer), compute_(compute), comm_(comm) {}

  absl::Status Record(Stream& stream) override {
    recorded_on_comm_ = &stream == comm_;
    return inner_->Record(stream);
  }
  absl::Status WaitOn(Stream& waiting_stream) override {
    if (!recorded_on_comm_ || &waiting_stream != compute_) return inner_->WaitOn(waiting_stream);
    if (absl::Status before = timer_->Before(waiting_stream); !before.ok()) return before;
    if (absl::Status waited = inner_->WaitOn(waiting_stream); !waited.ok()) return waited;
    return timer_->After(waiting_stream);
  }
  absl::Status Synchronize() override { return inner_->Synchronize(); }

 private:
  std::unique_ptr<Event> inner_;
  StreamWaitTimer* timer_;
  const Stream* compute_;
  const Stream* comm_;
  bool recorded_on_comm_ = false;
};

// A copy reads and writes every byte once.
OpCost CopyCost(const Tensor& device) { return {0.0, 2.0 * static_cast<double>(device.bytes())}; }

}  // namespace

ProfilingBackend::ProfilingBackend(std::unique_ptr<Backend> inner, ProfileRecorder* recorder,
                                   std::unique_ptr<StreamWaitTimer> timer)
    : inner_(std::move(inner)),
      recorder_(recorder),
      ops_(&inner_->ops(), recorder, &inner_->comm_stream()),
      timer_(std::move(timer)) {}

absl::StatusOr<std::unique_ptr<Event>> ProfilingBackend::CreateEvent() {
  absl::StatusOr<std::unique_ptr<Event>> event = inner_->CreateEvent();
  if (!event.ok() || timer_ == nullptr) return event;
  return std::unique_ptr<Event>(new WaitTimedEvent(
      std::move(*event), timer_.get(), &inner_->compute_stream(), &inner_->comm_stream()));
}

absl::Status ProfilingBackend::CopyToDevice(const void* host, const Tensor& device,
                                            Stream& stream) {
  if (!recorder_->active()) return inner_->CopyToDevice(host, device, stream);
  const ProfileLane lane =
      &stream == &inner_->comm_stream() ? ProfileLane::kComm : ProfileLane::kCompute;
  const double start = ProfileRecorder::Now();
  const uint64_t site = recorder_->OpenSite("memcpy_host_to_device", lane, /*is_op=*/true);
  absl::Status status = inner_->CopyToDevice(host, device, stream);
  recorder_->CloseSite(site);
  const double end = ProfileRecorder::Now();
  const OpCost cost = CopyCost(device);
  if (status.ok()) {
    recorder_->RecordOp("memcpy_host_to_device", lane, start, end - start, &cost, device.Describe(),
                        nullptr, site);
  }
  return status;
}

absl::Status ProfilingBackend::CopyToHost(const Tensor& device, void* host, Stream& stream) {
  if (!recorder_->active()) return inner_->CopyToHost(device, host, stream);
  const ProfileLane lane =
      &stream == &inner_->comm_stream() ? ProfileLane::kComm : ProfileLane::kCompute;
  const double start = ProfileRecorder::Now();
  const uint64_t site = recorder_->OpenSite("memcpy_device_to_host", lane, /*is_op=*/true);
  absl::Status status = inner_->CopyToHost(device, host, stream);
  recorder_->CloseSite(site);
  const double end = ProfileRecorder::Now();
  const OpCost cost = CopyCost(device);
  if (status.ok()) {
    recorder_->RecordOp("memcpy_device_to_host", lane, start, end - start, &cost, device.Describe(),
                        nullptr, site);
  }
  return status;
}

}  // namespace fsdpd
