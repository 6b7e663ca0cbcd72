// One rank of a job through RunTrainer, in process, recording each step's loss and the memory
// peak: what the CUDA engine tests compare between engines, settings and PyTorch's fixtures.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/temp_dir.h"
#include "worker/trainer.h"

namespace fsdpd::testing {

struct Trajectory {
  std::vector<double> losses;
  int64_t peak_bytes = 0;
};

// The job on `worker_device` ("cpu", "cuda:0"), checkpoints in a temporary folder; a failed run
// fails the test and returns the steps it reported.
inline Trajectory Train(const v1::JobSpec& spec, const std::string& worker_device,
                        bool optimizer_in_backward = true) {
  TempDir dir;
  RankContext context;
  context.job_id = spec.name();
  context.device = worker_device;
  context.optimizer_in_backward = optimizer_in_backward;
  context.checkpoint_dir = dir.path() + "/job";
  Trajectory trajectory;
  TrainerHooks hooks;
  hooks.on_step = [&](const v1::StepReport& report) {
    EXPECT_EQ(report.step(), static_cast<int64_t>(trajectory.losses.size()) + 1);
    EXPECT_GT(report.memory_peak_bytes(), 0);
    EXPECT_LE(report.memory_current_bytes(), report.memory_peak_bytes());
    trajectory.peak_bytes = std::max<int64_t>(trajectory.peak_bytes, report.memory_peak_bytes());
    trajectory.losses.push_back(report.loss());
  };
  auto result = RunTrainer(spec, context, hooks);
  EXPECT_TRUE(result.ok()) << worker_device << ": " << result.status();
  return trajectory;
}

}  // namespace fsdpd::testing
