#include "worker/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace fsdpd {

double LearningRateAt(const v1::TrainSpec& train, int64_t step) {
  const double peak = train.lr();
  const int64_t warmup = std::max<int64_t>(train.warmup_steps(), 0);
  if (warmup > 0 && step <= warmup) {
    return peak * static_cast<double>(std::max<int64_t>(step, 1)) / static_cast<double>(warmup);
  }
  if (train.lr_schedule() != "cosine") return peak;
  const int64_t decay_steps = train.steps() - warmup;
  if (decay_steps <= 1) return peak;
  // Step warmup+1 starts at the peak, the last step reaches the floor.
  const double progress = std::clamp(
      static_cast<double>(step - warmup - 1) / static_cast<double>(decay_steps - 1), 0.0, 1.0);
  const double floor = train.min_lr_ratio();
  const double cosine = 0.5 * (1.0 + std::cos(M_PI * progress));
  return peak * (floor + (1.0 - floor) * cosine);
}

}  // namespace fsdpd
