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

  absl::Status EmbeddingForward(const Tensor& weight, const Tensor& tokens, const Tensor& out,
                                Stream& stream) override;
  absl::Status EmbeddingBackward(const Tensor& dout, const Tensor& tokens, const Tensor& dweight,
                                 Stream& stream) override;
  absl::Status RmsNormForward(const Tensor& x, const Tensor& weight, double eps, const Tensor& out,
                              const Tensor& rstd, Stream& stream) override;
  absl::Status RmsNormBackward(const Tensor& dout, const Tensor& x, const Tensor& weight,
                               const Tensor& rstd, const Tensor& dx, const Tensor& dweight,
                               Stream& stream) override;
  absl::Status LinearForward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                             const Tensor& out, Stream& stream) override;
  absl::Status LinearBackward(const Tensor& dout, const Tensor& x, const Tensor& weight,
                              const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                              Stream& stream) override;
  absl::Status AttentionForward(const Tensor& qkv, int64_t heads, bool causal, const Tensor& out,
                                const Tensor& lse, Stream& stream) override;
  absl::Status AttentionBackward(const Tensor& dout, const Tensor& qkv, const Tensor& out,
                                 const Tensor& lse, int64_t heads, bool causal, const Tensor& dqkv,
                                 Stream& stream) override;
  absl::Status SiluForward(const Tensor& x, const Tensor& out, Stream& stream) override;
  absl::Status SiluBackward(const Tensor& dout, const Tensor& x, const Tensor& dx,
                            Stream& stream) override;
  absl::Status Add(const Tensor& a, const Tensor& b, const Tensor& out, Stream& stream) override;
  absl::Status HeadCrossEntropy(const Tensor& x, const Tensor& head, const Tensor& targets,
                                double loss_scale, const Tensor& loss, const Tensor& dx,
                                const Tensor& dhead, Stream& stream) override;
  absl::Status Cast(const Tensor& src, const Tensor& dst, Stream& stream) override;
  absl::Status RoundToBf16(const Tensor& x, Stream& stream) override;
  absl::Status Fill(const Tensor& x, float value, Stream& stream) override;
  absl::Status Scale(const Tensor& x, float factor, Stream& stream) override;
  absl::Status SumOfSquares(const Tensor& x, const Tensor& result, Stream& stream) override;
  absl::Status AdamW(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                     const Tensor& exp_avg_sq, const AdamWParams& params, Stream& stream) override;

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
