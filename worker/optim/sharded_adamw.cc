#include "worker/optim/sharded_adamw.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace fsdpd {

absl::StatusOr<std::unique_ptr<ShardedAdamW>> ShardedAdamW::Create(Backend* backend,
                                                                   Communicator* communicator,
                                                                   FsdpState* state) {
  const int64_t slots = state->num_units() + 1;
  FSDPD_ASSIGN_OR_RETURN(std::unique_ptr<Buffer> sums, backend->Allocate(slots * sizeof(float)));
  FSDPD_RETURN_IF_ERROR(
      backend->ops().Fill(sums->View(DType::kF32, {slots}), 0.0f, backend->compute_stream()));
  return std::unique_ptr<ShardedAdamW>(
      new ShardedAdamW(backend, communicator, state, std::move(sums)));
}

Tensor ShardedAdamW::UnitSquareSum(int unit) const {
  return unit_square_sums_->View(DType::kF32, {1}, unit * static_cast<int64_t>(sizeof(float)));
}

absl::Status ShardedAdamW::UpdateShard(UnitShard& shard, const AdamWParams& params,
                                       const Tensor& grad_square_sum, Stream& stream) {
  const int64_t valid = shard.layout.valid_shard_numel;
  const Tensor grad = shard.grad->View(DType::kF32, {valid});
  const Tensor exp_avg = shard.exp_avg->View(DType::kF32, {valid});
  const Tensor exp_avg_sq = shard.exp_avg_sq->View(DType::kF32, {valid});
  Ops& ops = backend_->ops();
  if (shard.split_master()) {
    return ops.AdamWSplitMaster(shard.master->View(DType::kBF16, {valid}),
                                shard.master_low->View(DType::kBF16, {valid}), grad, exp_avg,
                                exp_avg_sq, params, grad_square_sum, stream);
  }
  const Tensor master = shard.master->View(DType::kF32, {valid});
  if (grad_square_sum.data == nullptr) {
    return ops.AdamW(master, grad, exp_avg, exp_avg_sq, params, stream);
  }
  return ops.AdamWWithGradSquareSum(master, grad, exp_avg, exp_avg_sq, params, grad_square_sum,
                                    stream);
}

absl::Status ShardedAdamW::AccumulateSquareSum(int unit, Stream& stream) {
  const UnitShard& shard = state_->shard(unit);
  const int64_t valid = shard.layout.valid_shard_numel;
  if (valid == 0) return absl::OkStatus();
  if (shard.grad == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("ShardedAdamW: unit ", unit, " has no gradient shard now"));
  }
  return backend_->ops().SumOfSquares(shard.grad->View(DType::kF32, {valid}), UnitSquareSum(unit),
                                      stream);
}

absl::StatusOr<double> ShardedAdamW::ReduceNorm() {
  Stream& stream = backend_->compute_stream();
  const int units = state_->num_units();
  std::vector<float> unit_sums(static_cast<size_t>(units));
  FSDPD_RETURN_IF_ERROR(backend_->CopyToHost(unit_square_sums_->View(DType::kF32, {units}),
                                             unit_sums.data(), stream));
  // Summed in double in unit order, skipping empty shards: the same arithmetic whichever way
  // the optimizer runs.
  double local_sum = 0.0;
  for (int unit = 0; unit < units; ++unit) {
    if (state_->shard(unit).layout.valid_shard_numel == 0) continue;
    local_sum += unit_sums[static_cast<size_t>(unit)];
  }
  const float local = static_cast<float>(local_sum);
  // One rank's sum is the global one: no round trip through the device (the same bits).
  if (communicator_->world_size() == 1) return std::sqrt(static_cast<double>(local));
  const Tensor total = UnitSquareSum(units);
  FSDPD_RETURN_IF_ERROR(backend_->CopyToDevice(&local, total, stream));
  FSDPD_RETURN_IF_ERROR(communicator_->AllReduce(total, ReduceOp::kSum, stream));
  float global_sum = 0.0f;
  FSDPD_RETURN_IF_ERROR(backend_->CopyToHost(total, &global_sum, stream));
  return std::sqrt(static_cast<double>(global_sum));
}

absl::StatusOr<double> ShardedAdamW::GlobalGradNorm() {
  if (state_->transient_grad_shards()) {
    return absl::FailedPreconditionError(
        "ShardedAdamW: with transient gradient shards the norm comes from FinishBackwardStep");
  }
  for (int unit = 0; unit < state_->num_units(); ++unit) {
    FSDPD_RETURN_IF_ERROR(AccumulateSquareSum(unit, backend_->compute_stream()));
  }
  return ReduceNorm();
}

absl::StatusOr<double> ShardedAdamW::Step(const AdamWParams& params, double max_grad_norm) {
  if (state_->transient_grad_shards()) {
    return absl::FailedPreconditionError(
        "ShardedAdamW::Step: the gradient shards are transient, so the optimizer must run in "
        "backward (BeginBackwardStep); clipping needs persistent gradient shards");
  }
  Stream& stream = backend_->compute_stream();
  FSDPD_ASSIGN_OR_RETURN(const double norm, GlobalGradNorm());
  if (!std::isfinite(norm)) {
    return absl::InternalError(
        "the gradient norm is not finite (NaN or infinity): training diverged");
  }
  // torch.nn.utils.clip_grad_norm_: scale by max_norm / (norm + 1e-6) when that is below 1.
  const double clip_coefficient = max_grad_norm > 0.0 ? max_grad_norm / (norm + 1e-6) : 1.0;
  for (int unit = 0; unit < state_->num_units(); ++unit) {
    UnitShard& shard = state_->shard(unit);
    const int64_t valid = shard.layout.valid_shard_numel;
    if (valid == 0) continue;
    const Tensor grad = shard.grad->View(DType::kF32, {valid});
    if (clip_coefficient < 1.0) {
      FSDPD_RETURN_IF_ERROR(
          backend_->ops().Scale(grad, static_cast<float>(clip_coefficient), stream));
    }
    FSDPD_RETURN_IF_ERROR(UpdateShard(shard, params, Tensor{}, stream));
  }
  return norm;
}

absl::Status ShardedAdamW::BeginBackwardStep(const AdamWParams& params) {
  backward_params_ = params;
  updated_in_backward_.assign(static_cast<size_t>(state_->num_units()), false);
  in_backward_step_ = true;
  return absl::OkStatus();
}

absl::Status ShardedAdamW::ConsumeGradientShard(int unit, UnitShard& shard, Stream& stream) {
  if (!in_backward_step_) {
    return absl::FailedPreconditionError(
        "ShardedAdamW: a gradient shard arrived outside BeginBackwardStep/FinishBackwardStep");
  }
  if (unit < 0 || unit >= state_->num_units() || &shard != &state_->shard(unit)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ShardedAdamW: gradient shard of unknown unit ", unit));
  }
  if (updated_in_backward_[static_cast<size_t>(unit)]) {
    return absl::FailedPreconditionError(
        absl::StrCat("ShardedAdamW: unit ", unit, " was already updated in this step"));
  }
  updated_in_backward_[static_cast<size_t>(unit)] = true;
  const int64_t valid = shard.layout.valid_shard_numel;
  if (valid == 0) return absl::OkStatus();
  if (shard.grad == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("ShardedAdamW: unit ", unit, " has no gradient shard now"));
  }
  // The norm's sum comes from the update's own pass over the gradient (for a split master, a
  // pass of its own), with the bits SumOfSquares gives in Step (the Ops contract), so both ways
  // report the same norm.
  return UpdateShard(shard, backward_params_, UnitSquareSum(unit), stream);
}

absl::StatusOr<double> ShardedAdamW::FinishBackwardStep() {
  if (!in_backward_step_) {
    return absl::FailedPreconditionError("ShardedAdamW::FinishBackwardStep without a begun step");
  }
  in_backward_step_ = false;
  for (int unit = 0; unit < state_->num_units(); ++unit) {
    if (!updated_in_backward_[static_cast<size_t>(unit)]) {
      return absl::InternalError(
          absl::StrCat("ShardedAdamW: unit ", unit,
                       " got no gradient shard in backward, so it was not updated"));
    }
  }
  FSDPD_ASSIGN_OR_RETURN(const double norm, ReduceNorm());
  if (!std::isfinite(norm)) {
    return absl::InternalError(
        "the gradient norm is not finite (NaN or infinity): training diverged");
  }
  return norm;
}

}  // namespace fsdpd
