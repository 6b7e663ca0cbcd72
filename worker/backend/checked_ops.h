// An Ops decorator that checks the backend-independent part of the ops contract
// (worker/backend/ops.h) once, for every backend, before forwarding to the backend's ops:
// every tensor present with no negative dimension, the shapes and element counts that fit
// together, the dtypes the contract fixes (token ids i32; rstd, lse, the loss, sums of squares
// and the AdamW state f32), the scalar arguments (eps, heads, AdamW hyperparameters) and
// aliasing: an output never overlaps an input or another output, except that an element-wise
// op (Add, SiluForward, SiluBackward, SwigluBackward's dgate_up over gate_up, a same-dtype
// Cast) may write exactly over an input in place, and Rotary works in place. The backends' ops keep
// only what is theirs: activation and parameter dtypes, launch limits, id ranges they can check
// without a sync. Each failure is INVALID_ARGUMENT naming the op, the argument and its shape.
#pragma once

#include <memory>

#include "worker/backend/ops.h"

namespace fsdpd {

class CheckedOps : public Ops {
 public:
  explicit CheckedOps(std::unique_ptr<Ops> inner) : inner_(std::move(inner)) {}

  // The backend's own ops, unchecked.
  Ops& inner() { return *inner_; }

  FSDPD_OPS_OVERRIDES

 private:
  std::unique_ptr<Ops> inner_;
};

}  // namespace fsdpd
