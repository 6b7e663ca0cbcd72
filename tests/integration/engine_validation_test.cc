// Validation (data.eval_path, eval_every, eval_batches) in RunTrainer on the CPU engine: the
// eval loss is the forward loss of the held-out batches on the weights after the step, it
// changes no weight, gradient or optimizer state (the trajectory is bit-identical without it),
// it runs every eval_every steps and at the last, and a resumed job continues its history.
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "formats/safetensors.h"
#include "gtest/gtest.h"
#include "proto/spec/job_spec.h"
#include "tests/unit/engine_test_support.h"
#include "worker/comm/file_key_value_store.h"
#include "worker/trainer.h"

namespace fsdpd {
namespace {

// 17 uint16 tokens below 40: (17 − 1) / 8 = 2 windows of seq_len 8, exactly one batch of 2 rows,
// so every training batch and the one held-out batch are the same rows.
std::string WriteOneBatchOfTokens(const std::string& dir) {
  const std::string path = dir + "/one_batch.bin";
  std::ofstream out(path, std::ios::binary);
  for (uint16_t i = 0; i < 17; ++i) {
    const uint16_t id = static_cast<uint16_t>((i * 7 + 3) % 40);
    out.write(reinterpret_cast<const char*>(&id), sizeof(id));
  }
  return path;
}

v1::JobSpec TinyJob(const std::string& tokens, int world, int64_t steps, int64_t eval_every) {
  v1::JobSpec spec = DefaultJobSpec();
  spec.set_name("validation");
  spec.mutable_model()->set_vocab(40);
  spec.mutable_model()->set_dim(16);
  spec.mutable_model()->set_layers(2);
  spec.mutable_model()->set_heads(2);
  spec.mutable_model()->set_ffn_mult(2);
  spec.mutable_data()->set_source("tokens");
  spec.mutable_data()->set_path(tokens);
  spec.mutable_data()->set_seq_len(8);
  spec.mutable_data()->set_eval_path(tokens);
  spec.mutable_data()->set_eval_every(eval_every);
  spec.mutable_data()->set_eval_batches(1);
  spec.mutable_train()->set_batch_size(2 / world);
  spec.mutable_train()->set_steps(steps);
  spec.mutable_train()->set_lr(1e-2);
  spec.mutable_parallel()->set_world_size(world);
  spec.mutable_parallel()->set_device("cpu");
  spec.mutable_parallel()->set_param_dtype("fp32");
  spec.mutable_checkpoint()->set_every_steps(0);
  return spec;
}

struct TrainedRun {
  std::map<int64_t, float> losses;
  std::map<int64_t, double> eval_losses;
  std::vector<NamedTensor> weights;
  absl::Status status;
};

// Runs the ranks on threads in `job_dir` (a resumable checkpoint folder); rank 0's reports.
TrainedRun Train(const v1::JobSpec& spec, const std::string& job_dir,
                 int64_t cancel_after_step = -1) {
  const int world = spec.parallel().world_size();
  testing::TempDir store_dir;
  auto store = FileKeyValueStore::Open(store_dir.path());
  EXPECT_TRUE(store.ok()) << store.status();
  if (!store.ok()) return {};
  TrainedRun run;
  std::mutex mutex;
  std::atomic<bool> cancelled{false};
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < world; ++rank) {
    ranks.emplace_back([&, rank] {
      RankContext context;
      context.job_id = "job";
      context.rank = rank;
      context.world_size = world;
      context.store = store->get();
      context.checkpoint_dir = job_dir;
      TrainerHooks hooks;
      hooks.cancelled = &cancelled;
      hooks.on_step = [&](const v1::StepReport& report) {
        if (report.step() == cancel_after_step) cancelled = true;
        if (rank != 0) return;
        run.losses[report.step()] = static_cast<float>(report.loss());
        if (report.has_eval_loss()) run.eval_losses[report.step()] = report.eval_loss();
      };
      auto result = RunTrainer(spec, context, hooks);
      std::lock_guard<std::mutex> lock(mutex);
      if (!result.ok()) {
        if (rank == 0) run.status = result.status();
        return;
      }
      if (rank == 0) {
        auto weights = ReadSafetensors(result->exported_model_path);
        EXPECT_TRUE(weights.ok()) << weights.status();
        if (weights.ok()) run.weights = std::move(*weights);
      }
    });
  }
  for (std::thread& thread : ranks) thread.join();
  return run;
}

class ValidationTest : public ::testing::TestWithParam<int> {
 protected:
  testing::TempDir dir_;
};

TEST_P(ValidationTest, TheEvalLossIsTheForwardLossAfterTheStepAndChangesNothing) {
  const std::string tokens = WriteOneBatchOfTokens(dir_.path());
  const TrainedRun with = Train(TinyJob(tokens, GetParam(), 7, 2), dir_.path() + "/with");
  const TrainedRun without = Train(TinyJob(tokens, GetParam(), 7, 0), dir_.path() + "/without");
  ASSERT_TRUE(with.status.ok()) << with.status;
  ASSERT_TRUE(without.status.ok()) << without.status;
  ASSERT_EQ(with.losses.size(), 7u);
  // Every second step and the last.
  std::vector<int64_t> eval_steps;
  for (const auto& [step, loss] : with.eval_losses) eval_steps.push_back(step);
  EXPECT_EQ(eval_steps, (std::vector<int64_t>{2, 4, 6, 7}));
  EXPECT_TRUE(without.eval_losses.empty());
  // The held-out batch is the training batch: its loss after step s is step s + 1's training
  // loss (the forward before that step's update), to the bit.
  for (int64_t step : {2, 4, 6}) {
    EXPECT_EQ(static_cast<float>(with.eval_losses.at(step)), with.losses.at(step + 1))
        << "after step " << step;
  }
  // No gradient and no update: the same trajectory and weights as without validation.
  EXPECT_EQ(with.losses, without.losses);
  ASSERT_EQ(with.weights.size(), without.weights.size());
  ASSERT_FALSE(with.weights.empty());
  for (size_t i = 0; i < with.weights.size(); ++i) {
    EXPECT_EQ(std::memcmp(with.weights[i].values.data(), without.weights[i].values.data(),
                          with.weights[i].values.size() * sizeof(float)),
              0)
        << with.weights[i].name;
  }
}

TEST_P(ValidationTest, AResumedJobContinuesItsValidationHistory) {
  const std::string tokens = WriteOneBatchOfTokens(dir_.path());
  v1::JobSpec spec = TinyJob(tokens, GetParam(), 8, 2);
  spec.mutable_checkpoint()->set_every_steps(3);
  const TrainedRun whole = Train(spec, dir_.path() + "/whole");
  ASSERT_TRUE(whole.status.ok()) << whole.status;
  const TrainedRun first = Train(spec, dir_.path() + "/resumed", /*cancel_after_step=*/5);
  EXPECT_EQ(first.status.code(), absl::StatusCode::kCancelled) << first.status;
  const TrainedRun second = Train(spec, dir_.path() + "/resumed");
  ASSERT_TRUE(second.status.ok()) << second.status;
  EXPECT_EQ(second.losses.begin()->first, 4) << "resumed after the checkpoint of step 3";
  std::map<int64_t, double> history = first.eval_losses;
  for (const auto& [step, loss] : second.eval_losses) history[step] = loss;
  EXPECT_EQ(history, whole.eval_losses);
  EXPECT_EQ(history.size(), 4u);  // 2, 4, 6, 8
}

INSTANTIATE_TEST_SUITE_P(Worlds, ValidationTest, ::testing::Values(1, 2));

}  // namespace
}  // namespace fsdpd
