// Learning-rate schedules of train.lr_schedule. Both start with a linear warmup over
// train.warmup_steps (none by default); "constant" then holds train.lr, "cosine" decays from
// train.lr to train.min_lr_ratio · train.lr at the last step, as torchtitan's warmup+cosine does.
// The spec's validator (proto/spec/spec_validate.h, ValidateTrain) bounds the schedule's fields.
#pragma once

#include <cstdint>

#include "fsdpd/v1/spec.pb.h"

namespace fsdpd {

// The learning rate of optimizer step `step` (1-based, as PyTorch's scheduler after `step`
// calls: step 1 is the first update).
double LearningRateAt(const v1::TrainSpec& train, int64_t step);

}  // namespace fsdpd
