// The optimizer step over FSDP's shards: PyTorch's AdamW (Ops::AdamW: decoupled weight decay on
// every parameter, bias correction, eps outside the sqrt) fused over each unit's flat fp32
// slice, after optional global grad-norm clipping computed across all ranks' shards.
//
// Two ways to drive it, with bit-identical results (AdamW is elementwise: the same gradients
// and the same operations per element, only the moment differs):
// - after backward: Step(params, max_grad_norm), needed when clipping (the norm must be known
//   before any unit is updated);
// - in backward, without clipping: BeginBackwardStep(params), pass the optimizer to
//   FsdpState::ForwardBackward as its GradientShardConsumer (each unit is updated as soon as its
//   gradient shard is reduced, so the whole-model gradient shard need never exist), then
//   FinishBackwardStep() for the norm.
#pragma once

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/backend/backend.h"
#include "worker/comm/communicator.h"
#include "worker/fsdp/fsdp_state.h"

namespace fsdpd {

class ShardedAdamW : public GradientShardConsumer {
 public:
  static absl::StatusOr<std::unique_ptr<ShardedAdamW>> Create(Backend* backend,
                                                              Communicator* communicator,
                                                              FsdpState* state);

  // The global L2 norm of the gradient (over every rank's shard). Collective.
  absl::StatusOr<double> GlobalGradNorm();

  // Clips the gradients to `max_grad_norm` (≤ 0: no clipping) as torch.nn.utils.
  // clip_grad_norm_ does, then updates every shard with `params` (params.step is 1-based).
  // Returns the norm before clipping. Collective. Padding is never read nor written, so it
  // stays zero.
  absl::StatusOr<double> Step(const AdamWParams& params, double max_grad_norm);

  // The optimizer in backward: the parameters of the step whose backward comes next.
  absl::Status BeginBackwardStep(const AdamWParams& params);
  // Queues the unit's squared-gradient sum and its AdamW update on `stream`.
  absl::Status ConsumeGradientShard(int unit, UnitShard& shard, Stream& stream) override;
  // After ForwardBackward: checks every unit was updated and returns the global gradient norm
  // (one all-reduce). Collective. A non-finite norm is an error, as in Step, though here the
  // update has already been applied: the run must stop without checkpointing it.
  absl::StatusOr<double> FinishBackwardStep();

 private:
  ShardedAdamW(Backend* backend, Communicator* communicator, FsdpState* state,
               std::unique_ptr<Buffer> unit_square_sums)
      : backend_(backend),
        communicator_(communicator),
        state_(state),
        unit_square_sums_(std::move(unit_square_sums)) {}

  Tensor UnitSquareSum(int unit) const;
  // AdamW on the shard's valid elements, whatever the master's layout; with grad_square_sum
  // given (data non-null), Σ grad² there too.
  absl::Status UpdateShard(UnitShard& shard, const AdamWParams& params,
                           const Tensor& grad_square_sum, Stream& stream);
  // Queues Σ grad² of the unit's valid shard into its slot of unit_square_sums_.
  absl::Status AccumulateSquareSum(int unit, Stream& stream);
  // Reads every unit's slot, sums them on the host in unit order and all-reduces the sum.
  absl::StatusOr<double> ReduceNorm();

  Backend* backend_;
  Communicator* communicator_;
  FsdpState* state_;
  // One fp32 per unit on the device (Σ grad² of this rank's valid shard), then one more for
  // the all-reduce.
  std::unique_ptr<Buffer> unit_square_sums_;
  AdamWParams backward_params_;
  std::vector<bool> updated_in_backward_;
  bool in_backward_step_ = false;
};

}  // namespace fsdpd
