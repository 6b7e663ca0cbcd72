// RunTrainer with the optimizer in backward (the default without clipping) against the step
// after backward: same losses, gradient norms and exported weights, bit for bit, at world sizes
// 1 and 2 (ranks on threads, Gloo over loopback); with clipping the trainer keeps the step after
// backward, so clipping still applies. Activation recompute changes no bit either.
#include <algorithm>
#include <cstring>
#include <mutex>
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

v1::JobSpec TinyJob(int world, double grad_clip) {
  v1::JobSpec spec = DefaultJobSpec();
  spec.set_name("optimizer-in-backward");
  spec.mutable_model()->set_vocab(40);
  spec.mutable_model()->set_dim(16);
  spec.mutable_model()->set_layers(2);
  spec.mutable_model()->set_heads(2);
  spec.mutable_model()->set_ffn_mult(2);
  spec.mutable_data()->set_seq_len(8);
  spec.mutable_train()->set_batch_size(2);
  spec.mutable_train()->set_steps(5);
  spec.mutable_train()->set_lr(1e-2);
  spec.mutable_train()->set_grad_clip(grad_clip);
  spec.mutable_parallel()->set_world_size(world);
  spec.mutable_parallel()->set_device("cpu");
  spec.mutable_checkpoint()->set_every_steps(0);
  return spec;
}

struct TrainedRun {
  std::vector<float> losses;
  std::vector<double> grad_norms;
  int64_t peak_bytes = 0;
  std::vector<std::string> logs;
  std::vector<NamedTensor> weights;
};

TrainedRun Train(const v1::JobSpec& spec, bool optimizer_in_backward) {
  const int world = spec.parallel().world_size();
  testing::TempDir dir;
  auto store = FileKeyValueStore::Open(dir.path() + "/store");
  EXPECT_TRUE(store.ok()) << store.status();
  if (!store.ok()) return {};
  TrainedRun run;
  std::mutex mutex;
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < world; ++rank) {
    ranks.emplace_back([&, rank] {
      RankContext context;
      context.job_id = "job";
      context.rank = rank;
      context.world_size = world;
      context.store = store->get();
      context.checkpoint_dir = dir.path() + "/job";
      context.optimizer_in_backward = optimizer_in_backward;
      TrainerHooks hooks;
      if (rank == 0) {
        hooks.on_step = [&](const v1::StepReport& report) {
          run.losses.push_back(report.loss());
          run.grad_norms.push_back(report.grad_norm());
          run.peak_bytes = std::max(run.peak_bytes, report.memory_peak_bytes());
        };
        hooks.on_log = [&](const std::string&, const std::string& text) {
          run.logs.push_back(text);
        };
      }
      auto result = RunTrainer(spec, context, hooks);
      ASSERT_TRUE(result.ok()) << "rank " << rank << ": " << result.status();
      if (rank == 0) {
        auto weights = ReadSafetensors(result->exported_model_path);
        ASSERT_TRUE(weights.ok()) << weights.status();
        std::lock_guard<std::mutex> lock(mutex);
        run.weights = std::move(*weights);
      }
    });
  }
  for (std::thread& thread : ranks) thread.join();
  return run;
}

bool Mentions(const TrainedRun& run, const std::string& text) {
  for (const std::string& line : run.logs) {
    if (line.find(text) != std::string::npos) return true;
  }
  return false;
}

void ExpectBitIdentical(const TrainedRun& actual, const TrainedRun& expected,
                        const std::string& label) {
  ASSERT_EQ(actual.losses.size(), 5u) << label;
  EXPECT_EQ(actual.losses, expected.losses) << label;
  EXPECT_EQ(actual.grad_norms, expected.grad_norms) << label;
  ASSERT_EQ(actual.weights.size(), expected.weights.size()) << label;
  ASSERT_FALSE(expected.weights.empty()) << label;
  for (size_t i = 0; i < expected.weights.size(); ++i) {
    const NamedTensor& a = actual.weights[i];
    const NamedTensor& b = expected.weights[i];
    ASSERT_EQ(a.name, b.name) << label;
    ASSERT_EQ(a.values.size(), b.values.size()) << label << " " << a.name;
    EXPECT_EQ(std::memcmp(a.values.data(), b.values.data(), a.values.size() * sizeof(float)), 0)
        << label << ": " << a.name << " differs";
  }
}

class OptimizerInBackwardTrainerTest : public ::testing::TestWithParam<int> {};

TEST_P(OptimizerInBackwardTrainerTest, WithoutClippingMatchesTheStepAfterBackwardBitForBit) {
  const v1::JobSpec spec = TinyJob(GetParam(), 0.0);
  const TrainedRun after = Train(spec, false);
  const TrainedRun during = Train(spec, true);
  EXPECT_TRUE(Mentions(after, "AdamW runs after backward"));
  EXPECT_TRUE(Mentions(during, "AdamW runs in backward"));
  ExpectBitIdentical(during, after, "world " + std::to_string(GetParam()));
  EXPECT_LT(during.losses.back(), during.losses.front()) << "the tiny model must learn";
}

TEST_P(OptimizerInBackwardTrainerTest, WithClippingKeepsTheStepAfterBackward) {
  // Well below the unclipped gradient norm (about 1 here), so clipping changes every step.
  const v1::JobSpec clipped = TinyJob(GetParam(), 0.05);
  const TrainedRun during = Train(clipped, true);
  EXPECT_TRUE(Mentions(during, "AdamW runs after backward"));
  ExpectBitIdentical(during, Train(clipped, false), "clipped");
  const TrainedRun unclipped = Train(TinyJob(GetParam(), 0.0), true);
  ASSERT_EQ(unclipped.weights.size(), during.weights.size());
  EXPECT_GT(during.grad_norms.front(), 0.05);
  EXPECT_NE(unclipped.losses.back(), during.losses.back()) << "clipping had no effect";
}

TEST_P(OptimizerInBackwardTrainerTest, ActivationRecomputeChangesNoBitAndKeepsLess) {
  v1::JobSpec spec = TinyJob(GetParam(), 0.0);
  spec.mutable_model()->set_layers(3);
  const TrainedRun none = Train(spec, true);
  spec.mutable_parallel()->set_activation_recompute("ffn");
  const TrainedRun ffn = Train(spec, true);
  spec.mutable_parallel()->set_activation_recompute("block");
  const TrainedRun block = Train(spec, true);
  ExpectBitIdentical(ffn, none, "ffn");
  ExpectBitIdentical(block, none, "block");
  EXPECT_LT(ffn.peak_bytes, none.peak_bytes);
  EXPECT_LT(block.peak_bytes, ffn.peak_bytes);
}

INSTANTIATE_TEST_SUITE_P(Worlds, OptimizerInBackwardTrainerTest, ::testing::Values(1, 2));

}  // namespace
}  // namespace fsdpd
