// The validator of train.grad_accum_steps (spec_validate.h): how many micro-batches one optimizer
// step sums.
#include "absl/strings/str_cat.h"
#include "proto/spec/spec_validate.h"

namespace fsdpd {

void ValidateGradAccumulation(const v1::TrainSpec& train, FieldErrors& errors) {
  if (!errors.InRange("train.grad_accum_steps", train.grad_accum_steps(), 1,
                      SpecLimits::kMaxGradAccumSteps)) {
    return;
  }
  // The sequences of one step on one rank are counted in 64 bits by the data loaders.
  if (train.batch_size() > 0 &&
      train.batch_size() * train.grad_accum_steps() > SpecLimits::kMaxBatch * 16) {
    errors.Fail("train.grad_accum_steps",
                absl::StrCat("batch_size × grad_accum_steps must be at most ",
                             SpecLimits::kMaxBatch * 16, " sequences a rank per step (got ",
                             train.batch_size(), " × ", train.grad_accum_steps(), ")"));
  }
}

}  // namespace fsdpd
