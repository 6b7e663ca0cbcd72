// An Ops decorator that, while its recorder's window is active, times every op with a host
// timer (or, device-timed, opens a launch site around it) and records its name, analytic cost,
// input shapes, stream, and the current FSDP unit and phase. Outside a window each op costs one
// branch more than the backend's own.
#pragma once

#include "worker/backend/backend.h"
#include "worker/backend/ops.h"
#include "worker/profiler/profile_recorder.h"

namespace fsdpd {

class ProfilingOps : public Ops {
 public:
  // `comm_stream` tells the comm stream's ops from the compute stream's.
  ProfilingOps(Ops* inner, ProfileRecorder* recorder, const Stream* comm_stream)
      : inner_(inner), recorder_(recorder), comm_stream_(comm_stream) {}

  FSDPD_OPS_OVERRIDES

 private:
  // Runs `call`; when recording and it succeeded, records it with cost() and the shapes of
  // `inputs`. Cost and shapes are only computed inside a window.
  template <typename Call, typename CostFunction>
  absl::Status Run(const char* name, Stream& stream, std::initializer_list<const Tensor*> inputs,
                   Call call, CostFunction cost) {
    if (!recorder_->active()) return call();
    const ProfileLane lane = &stream == comm_stream_ ? ProfileLane::kComm : ProfileLane::kCompute;
    const double start = ProfileRecorder::Now();
    const uint64_t site = recorder_->OpenSite(name, lane, /*is_op=*/true);
    absl::Status status = call();
    recorder_->CloseSite(site);
    const double end = ProfileRecorder::Now();
    if (status.ok()) {
      const OpCost op_cost = cost();
      recorder_->RecordOp(name, lane, start, end - start, &op_cost, DescribeShapes(inputs), nullptr,
                          site);
    }
    return status;
  }

  Ops* inner_;
  ProfileRecorder* recorder_;
  const Stream* comm_stream_;
};

}  // namespace fsdpd
