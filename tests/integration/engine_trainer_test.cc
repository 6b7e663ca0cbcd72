// RunTrainer in process: cancellation, unsupported devices, inconsistent worlds, and a
// checkpoint write that fails.
#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <vector>

#include "gtest/gtest.h"
#include "proto/spec/job_spec.h"
#include "tests/unit/engine_test_support.h"
#include "worker/checkpoint/checkpoint.h"
#include "worker/trainer.h"

namespace fsdpd {
namespace {

v1::JobSpec TinyJob(int64_t steps, int64_t every_steps) {
  v1::JobSpec spec = DefaultJobSpec();
  spec.set_name("engine-trainer-test");
  spec.mutable_model()->set_vocab(48);
  spec.mutable_model()->set_dim(16);
  spec.mutable_model()->set_layers(1);
  spec.mutable_model()->set_heads(2);
  spec.mutable_model()->set_ffn_mult(2);
  spec.mutable_data()->set_seq_len(8);
  spec.mutable_train()->set_batch_size(2);
  spec.mutable_train()->set_steps(steps);
  spec.mutable_train()->set_lr_schedule("cosine");
  spec.mutable_train()->set_warmup_steps(2);
  spec.mutable_train()->set_min_lr_ratio(0.1);
  spec.mutable_parallel()->set_world_size(1);
  spec.mutable_parallel()->set_device("cpu");
  spec.mutable_checkpoint()->set_every_steps(every_steps);
  return spec;
}

class EngineTrainerTest : public ::testing::Test {
 protected:
  RankContext Context() const {
    RankContext context;
    context.job_id = "job";
    context.checkpoint_dir = dir_.path() + "/job";
    return context;
  }
  testing::TempDir dir_;
};

TEST_F(EngineTrainerTest, ReportsEveryStepWithTheScheduledLearningRate) {
  std::vector<v1::StepReport> reports;
  std::vector<std::string> logs;
  TrainerHooks hooks;
  hooks.on_step = [&](const v1::StepReport& report) { reports.push_back(report); };
  hooks.on_log = [&](const std::string&, const std::string& text) { logs.push_back(text); };
  auto result = RunTrainer(TinyJob(6, 0), Context(), hooks);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(reports.size(), 6u);
  EXPECT_EQ(result->final_step, 6);
  EXPECT_EQ(result->final_loss, reports.back().loss());
  const double peak = DefaultJobSpec().train().lr();
  EXPECT_DOUBLE_EQ(reports[0].lr(), peak / 2);  // warmup 1 of 2
  EXPECT_DOUBLE_EQ(reports[2].lr(), peak);      // first step of the decay
  EXPECT_NEAR(reports[5].lr(), 0.1 * peak, 1e-12);
  for (const v1::StepReport& report : reports) {
    EXPECT_EQ(report.job_id(), "job");
    EXPECT_GT(report.step_seconds(), 0.0);
    EXPECT_GE(report.compute_seconds(), 0.0);
    EXPECT_LE(report.compute_seconds() + report.exposed_comm_seconds(),
              report.step_seconds() * 1.0001);
    EXPECT_GT(report.mfu_ratio(), 0.0);
    EXPECT_GT(report.memory_peak_bytes(), 0);
    EXPECT_GE(report.memory_peak_bytes(), report.memory_current_bytes());
    EXPECT_GT(report.grad_norm(), 0.0);
  }
  EXPECT_FALSE(logs.empty());
}

TEST_F(EngineTrainerTest, CancellingStopsBetweenStepsWithCancelled) {
  std::atomic<bool> cancelled{false};
  int steps_seen = 0;
  TrainerHooks hooks;
  hooks.cancelled = &cancelled;
  hooks.on_step = [&](const v1::StepReport& report) {
    ++steps_seen;
    if (report.step() == 2) cancelled = true;
  };
  auto result = RunTrainer(TinyJob(50, 0), Context(), hooks);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kCancelled) << result.status();
  EXPECT_EQ(steps_seen, 2);
  EXPECT_FALSE(std::filesystem::exists(dir_.path() + "/job/model.safetensors"));
}

// The session may abort the collectives from its own thread while a step runs (a dead peer
// leaves the rank inside one, where the cancelled flag is never read): the run then fails that
// step with CANCELLED, and the abort function is withdrawn before the communicator goes.
TEST_F(EngineTrainerTest, AbortOfferedToTheSessionStopsTheCollectivesMidStep) {
  std::function<void()> abort;
  int offers = 0;
  int withdrawals = 0;
  int steps_seen = 0;
  TrainerHooks hooks;
  hooks.set_abort = [&](std::function<void()> offered) {
    (offered ? offers : withdrawals) += 1;
    abort = std::move(offered);
  };
  hooks.on_step = [&](const v1::StepReport& report) {
    ++steps_seen;
    if (report.step() == 2) {
      ASSERT_TRUE(abort);
      abort();
    }
  };
  auto result = RunTrainer(TinyJob(50, 0), Context(), hooks);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kCancelled) << result.status();
  EXPECT_EQ(steps_seen, 2);
  EXPECT_EQ(offers, 1);
  EXPECT_EQ(withdrawals, 1);
  EXPECT_FALSE(abort);
}

// The rank's own checks: its device must run the spec's, and its world must be the spec's.
TEST_F(EngineTrainerTest, RefusesWhatItCannotRunWithAClearError) {
  v1::JobSpec cuda = TinyJob(2, 0);
  cuda.mutable_parallel()->set_device("cuda");
  auto result = RunTrainer(cuda, Context(), {});
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(result.status().message().find("cuda"), std::string::npos);

  v1::JobSpec two_ranks = TinyJob(2, 0);
  two_ranks.mutable_parallel()->set_world_size(2);
  result = RunTrainer(two_ranks, Context(), {});
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(result.status().message().find("world"), std::string::npos);
  // What the spec itself gets wrong is refused where it enters, not here: at submission
  // (SpecValidate.*, spec_rejection_test) or by fsdpd-train
  // (EngineMultiProcessTest.AnInvalidSpecIsRefusedBeforeAnyRankStarts).
}

TEST_F(EngineTrainerTest, AFailedCheckpointWriteFailsTheRunAndKeepsThePreviousCheckpoint) {
  std::filesystem::create_directories(dir_.path() + "/job");
  // A plain file where the step-4 directory must go makes that write fail.
  std::ofstream(dir_.path() + "/job/step-00000004") << "in the way";
  int last_step = 0;
  TrainerHooks hooks;
  hooks.on_step = [&](const v1::StepReport& report) { last_step = report.step(); };
  auto result = RunTrainer(TinyJob(6, 2), Context(), hooks);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(last_step, 4);
  EXPECT_NE(result.status().message().find("checkpoint of step 4"), std::string::npos)
      << result.status();
  auto steps = ListCommittedSteps(dir_.path() + "/job");
  ASSERT_TRUE(steps.ok()) << steps.status();
  EXPECT_EQ(*steps, std::vector<int64_t>{2});
  EXPECT_TRUE(LoadRankCheckpoint(dir_.path() + "/job", 2, 0, 1).ok());

  // Once the obstacle is gone, a rerun resumes from step 2 and finishes.
  std::filesystem::remove(dir_.path() + "/job/step-00000004");
  std::vector<int64_t> resumed_steps;
  hooks.on_step = [&](const v1::StepReport& report) { resumed_steps.push_back(report.step()); };
  result = RunTrainer(TinyJob(6, 2), Context(), hooks);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(resumed_steps, (std::vector<int64_t>{3, 4, 5, 6}));
}

// Issue 11 §1: a checkpoint is resumed only by the job that wrote it, and only into the same
// shapes; anything else is refused with the reason, never resumed silently.
TEST_F(EngineTrainerTest, ACheckpointOfAnotherJobOrSetupIsRefusedWithTheReason) {
  RankContext first = Context();
  first.job_uid = "5b0e8c1e-0000-4000-8000-00000000000a";
  first.attempt = 2;
  ASSERT_TRUE(RunTrainer(TinyJob(4, 2), first, {}).ok());
  absl::StatusOr<CheckpointIdentity> recorded = ReadCheckpointIdentity(first.checkpoint_dir, 4);
  ASSERT_TRUE(recorded.ok()) << recorded.status();
  EXPECT_EQ(recorded->job_uid, first.job_uid);
  EXPECT_EQ(recorded->attempt, 2);
  EXPECT_NE(recorded->fingerprint.find("dim=16"), std::string::npos) << recorded->fingerprint;
  EXPECT_NE(recorded->fingerprint.find("world_size=1"), std::string::npos);

  int steps_run = 0;
  TrainerHooks hooks;
  hooks.on_step = [&](const v1::StepReport&) { ++steps_run; };
  RankContext other = first;
  other.job_uid = "5b0e8c1e-0000-4000-8000-00000000000b";
  auto result = RunTrainer(TinyJob(40, 2), other, hooks);
  ASSERT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition) << result.status();
  EXPECT_NE(result.status().message().find("belongs to job " + first.job_uid), std::string::npos)
      << result.status();
  EXPECT_EQ(steps_run, 0);

  v1::JobSpec wider = TinyJob(8, 2);
  wider.mutable_model()->set_dim(32);
  result = RunTrainer(wider, first, hooks);
  ASSERT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition) << result.status();
  EXPECT_NE(result.status().message().find("dim=16 (this job: dim=32)"), std::string::npos)
      << result.status();

  // The job that wrote it resumes from it.
  std::vector<int64_t> resumed;
  hooks.on_step = [&](const v1::StepReport& report) { resumed.push_back(report.step()); };
  result = RunTrainer(TinyJob(6, 2), first, hooks);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(resumed, (std::vector<int64_t>{5, 6}));
}

}  // namespace
}  // namespace fsdpd
