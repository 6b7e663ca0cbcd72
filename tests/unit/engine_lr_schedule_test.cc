#include <cmath>

#include "gtest/gtest.h"
#include "worker/optim/lr_schedule.h"

namespace fsdpd {
namespace {

v1::TrainSpec Train(const std::string& schedule, int64_t steps, int64_t warmup, double floor) {
  v1::TrainSpec train;
  train.set_lr(1e-3);
  train.set_steps(steps);
  train.set_lr_schedule(schedule);
  train.set_warmup_steps(warmup);
  train.set_min_lr_ratio(floor);
  return train;
}

TEST(LearningRateScheduleTest, ConstantHoldsTheLearningRate) {
  const v1::TrainSpec train = Train("constant", 50, 0, 0.0);
  for (int64_t step : {1, 2, 25, 50}) EXPECT_DOUBLE_EQ(LearningRateAt(train, step), 1e-3);
}

TEST(LearningRateScheduleTest, WarmupRisesLinearlyToThePeak) {
  const v1::TrainSpec train = Train("constant", 50, 4, 0.0);
  EXPECT_DOUBLE_EQ(LearningRateAt(train, 1), 0.25e-3);
  EXPECT_DOUBLE_EQ(LearningRateAt(train, 2), 0.5e-3);
  EXPECT_DOUBLE_EQ(LearningRateAt(train, 4), 1e-3);
  EXPECT_DOUBLE_EQ(LearningRateAt(train, 5), 1e-3);
}

TEST(LearningRateScheduleTest, CosineDecaysFromThePeakToTheFloor) {
  const v1::TrainSpec train = Train("cosine", 110, 10, 0.1);
  EXPECT_DOUBLE_EQ(LearningRateAt(train, 10), 1e-3);
  EXPECT_DOUBLE_EQ(LearningRateAt(train, 11), 1e-3);
  EXPECT_NEAR(LearningRateAt(train, 110), 1e-4, 1e-15);
  // Step 60 is 49 of the 99 decay intervals in.
  EXPECT_NEAR(LearningRateAt(train, 60),
              1e-3 * (0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 49 / 99.0))), 1e-15);
  double previous = LearningRateAt(train, 11);
  for (int64_t step = 12; step <= 110; ++step) {
    const double lr = LearningRateAt(train, step);
    EXPECT_LT(lr, previous) << "step " << step;
    previous = lr;
  }
}

}  // namespace
}  // namespace fsdpd
