// The optimizer step over FSDP's shards: PyTorch's AdamW (Ops::AdamW: decoupled weight decay on
// every parameter, bias correction, eps outside the sqrt) fused over each unit's flat fp32
// slice, after optional global grad-norm clipping computed across all ranks' shards.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "worker/backend/backend.h"
#include "worker/comm/communicator.h"
#include "worker/fsdp/fsdp_state.h"

namespace fsdpd {

class ShardedAdamW {
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

 private:
  ShardedAdamW(Backend* backend, Communicator* communicator, FsdpState* state,
               std::unique_ptr<Buffer> scalar)
      : backend_(backend), communicator_(communicator), state_(state), scalar_(std::move(scalar)) {}

  Backend* backend_;
  Communicator* communicator_;
  FsdpState* state_;
  std::unique_ptr<Buffer> scalar_;  // one fp32 on the device for reductions
};

}  // namespace fsdpd
