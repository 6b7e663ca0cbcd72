#include "worker/optim/sharded_adamw.h"

#include <cmath>

#include "worker/status_macros.h"

namespace fsdpd {

absl::StatusOr<std::unique_ptr<ShardedAdamW>> ShardedAdamW::Create(Backend* backend,
                                                                   Communicator* communicator,
                                                                   FsdpState* state) {
  FSDPD_ASSIGN_OR_RETURN(std::unique_ptr<Buffer> scalar, backend->Allocate(sizeof(float)));
  return std::unique_ptr<ShardedAdamW>(
      new ShardedAdamW(backend, communicator, state, std::move(scalar)));
}

absl::StatusOr<double> ShardedAdamW::GlobalGradNorm() {
  Stream& stream = backend_->compute_stream();
  const Tensor scalar = scalar_->View(DType::kF32, {1});
  double local_sum = 0.0;
  for (int unit = 0; unit < state_->num_units(); ++unit) {
    const UnitShard& shard = state_->shard(unit);
    if (shard.layout.valid_shard_numel == 0) continue;
    const Tensor grad = shard.grad->View(DType::kF32, {shard.layout.valid_shard_numel});
    FSDPD_RETURN_IF_ERROR(backend_->ops().SumOfSquares(grad, scalar, stream));
    float unit_sum = 0.0f;
    FSDPD_RETURN_IF_ERROR(backend_->CopyToHost(scalar, &unit_sum, stream));
    local_sum += unit_sum;
  }
  const float local = static_cast<float>(local_sum);
  FSDPD_RETURN_IF_ERROR(backend_->CopyToDevice(&local, scalar, stream));
  FSDPD_RETURN_IF_ERROR(communicator_->AllReduce(scalar, ReduceOp::kSum, stream));
  float global_sum = 0.0f;
  FSDPD_RETURN_IF_ERROR(backend_->CopyToHost(scalar, &global_sum, stream));
  return std::sqrt(static_cast<double>(global_sum));
}

absl::StatusOr<double> ShardedAdamW::Step(const AdamWParams& params, double max_grad_norm) {
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
    FSDPD_RETURN_IF_ERROR(backend_->ops().AdamW(
        shard.master->View(DType::kF32, {valid}), grad, shard.exp_avg->View(DType::kF32, {valid}),
        shard.exp_avg_sq->View(DType::kF32, {valid}), params, stream));
  }
  return norm;
}

}  // namespace fsdpd
