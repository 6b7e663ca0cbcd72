// The optimizer in backward (transient gradient shards, AdamW per unit as each reduce-scatter
// ends), on the compute stream and on the comm stream, against the step after backward: after
// several steps the fp32 masters and the reported gradient norms must be bit-identical, at world
// sizes 1, 2 and 3 (units that do not divide evenly), while the whole-model gradient shard never
// exists.
#include <cstring>
#include <mutex>
#include <vector>

#include "gtest/gtest.h"
#include "tests/unit/engine_test_support.h"
#include "worker/backend/cpu_backend.h"
#include "worker/fsdp/fsdp_state.h"
#include "worker/model/minillm.h"
#include "worker/optim/sharded_adamw.h"
#include "worker/trainer_weights.h"

namespace fsdpd {
namespace {

constexpr int64_t kGlobalBatch = 6;
constexpr int64_t kSeq = 8;
constexpr int kSteps = 4;

ModelConfig TinyConfig() {
  ModelConfig config;
  config.vocab = 37;
  config.dim = 16;
  config.layers = 3;
  config.heads = 2;
  config.ffn_hidden = 24;
  return config;
}

AdamWParams ParamsAt(int step) {
  AdamWParams params;
  params.lr = 1e-2 / step;  // changes per step, so a stale step's parameters would show
  params.weight_decay = 0.1;
  params.step = step;
  return params;
}

struct Outcome {
  std::vector<std::vector<float>> initial;  // per unit, unpadded
  std::vector<std::vector<float>> masters;
  std::vector<double> norms;
  std::vector<float> losses;
  int64_t resident_bytes = 0;  // after FsdpState and the optimizer are built
  int64_t peak_bytes = 0;
  int64_t grad_shard_bytes = 0;  // Σ this rank's fp32 gradient shards
};

enum class Placement { kAfterBackward, kInBackward, kInBackwardOnComm };

// Hands every shard to the optimizer and counts on which of the backend's streams it came.
class StreamCountingConsumer : public GradientShardConsumer {
 public:
  StreamCountingConsumer(GradientShardConsumer* inner, Backend* backend)
      : inner_(inner), backend_(backend) {}
  absl::Status ConsumeGradientShard(int unit, UnitShard& shard, Stream& stream) override {
    if (&stream == &backend_->comm_stream()) ++on_comm;
    if (&stream == &backend_->compute_stream()) ++on_compute;
    return inner_->ConsumeGradientShard(unit, shard, stream);
  }
  int on_comm = 0;
  int on_compute = 0;

 private:
  GradientShardConsumer* inner_;
  Backend* backend_;
};

Outcome Train(int world, Placement placement, bool bf16_params) {
  const bool in_backward = placement != Placement::kAfterBackward;
  const ModelConfig config = TinyConfig();
  Outcome outcome;
  std::mutex mutex;
  testing::RunRanks(world, [&](Communicator& communicator) {
    CpuBackend backend;
    const int64_t batch = kGlobalBatch / world;
    auto model = MiniLLM::Create(config, batch, kSeq, &backend);
    ASSERT_TRUE(model.ok()) << model.status();
    FsdpOptions options;
    options.round_params_to_bf16 = bf16_params;
    options.transient_grad_shards = in_backward;
    options.optimizer_on_comm_stream = placement == Placement::kInBackwardOnComm;
    auto state = FsdpState::Create((*model)->units(), &backend, &communicator, options);
    ASSERT_TRUE(state.ok()) << state.status();
    ASSERT_TRUE(InitializeWeightsFromSeed(config, 5, **state).ok());
    auto optimizer = ShardedAdamW::Create(&backend, &communicator, state->get());
    ASSERT_TRUE(optimizer.ok()) << optimizer.status();
    StreamCountingConsumer consumer(optimizer->get(), &backend);
    Outcome local;
    local.resident_bytes = backend.memory_stats().current_bytes;
    for (int unit = 0; unit < (*state)->num_units(); ++unit) {
      local.grad_shard_bytes += (*state)->shard(unit).layout.shard_numel * 4;
      std::vector<float> values;
      ASSERT_TRUE((*state)->GatherMasterToHost(unit, &values).ok());
      local.initial.push_back(std::move(values));
    }
    backend.ResetPeakMemory();
    for (int step = 1; step <= kSteps; ++step) {
      std::vector<int32_t> tokens(batch * kSeq), targets(batch * kSeq);
      for (size_t i = 0; i < tokens.size(); ++i) {
        const size_t global = i + communicator.rank() * tokens.size();
        tokens[i] = static_cast<int32_t>((global * 7 + 3 * step) % config.vocab);
        targets[i] = static_cast<int32_t>((global * 11 + 5 + step) % config.vocab);
      }
      absl::StatusOr<float> loss;
      absl::StatusOr<double> norm;
      if (in_backward) {
        ASSERT_TRUE((*optimizer)->BeginBackwardStep(ParamsAt(step)).ok());
        loss = (*state)->ForwardBackward(**model, tokens.data(), targets.data(), &consumer);
        ASSERT_TRUE(loss.ok()) << loss.status();
        norm = (*optimizer)->FinishBackwardStep();
      } else {
        loss = (*state)->ForwardBackward(**model, tokens.data(), targets.data());
        ASSERT_TRUE(loss.ok()) << loss.status();
        norm = (*optimizer)->Step(ParamsAt(step), 0.0);
      }
      ASSERT_TRUE(norm.ok()) << norm.status();
      local.norms.push_back(*norm);
      local.losses.push_back(*loss);
    }
    local.peak_bytes = backend.memory_stats().peak_bytes;
    // Every unit, every step, on the stream the options name.
    const int handed = in_backward ? kSteps * (*state)->num_units() : 0;
    EXPECT_EQ(consumer.on_comm, placement == Placement::kInBackwardOnComm ? handed : 0);
    EXPECT_EQ(consumer.on_compute, placement == Placement::kInBackward ? handed : 0);
    for (int unit = 0; unit < (*state)->num_units(); ++unit) {
      std::vector<float> values;
      ASSERT_TRUE((*state)->GatherMasterToHost(unit, &values).ok());
      local.masters.push_back(std::move(values));
    }
    if (communicator.rank() == 0) {
      std::lock_guard<std::mutex> lock(mutex);
      outcome = std::move(local);
    }
  });
  return outcome;
}

bool BitIdentical(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class OptimizerInBackwardTest : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(OptimizerInBackwardTest, IsBitIdenticalToTheStepAfterBackwardWithLessMemory) {
  const auto [world, bf16_params] = GetParam();
  const Outcome after = Train(world, Placement::kAfterBackward, bf16_params);
  ASSERT_EQ(after.masters.size(), TinyConfig().layers + 1);
  for (size_t unit = 0; unit < after.masters.size(); ++unit) {
    EXPECT_FALSE(BitIdentical(after.masters[unit], after.initial[unit]))
        << "unit " << unit << " was never updated";
  }
  for (Placement placement : {Placement::kInBackward, Placement::kInBackwardOnComm}) {
    SCOPED_TRACE(placement == Placement::kInBackward ? "compute stream" : "comm stream");
    const Outcome during = Train(world, placement, bf16_params);
    ASSERT_EQ(during.masters.size(), after.masters.size());
    for (size_t unit = 0; unit < after.masters.size(); ++unit) {
      EXPECT_TRUE(BitIdentical(during.masters[unit], after.masters[unit])) << "unit " << unit;
    }
    ASSERT_EQ(during.norms.size(), static_cast<size_t>(kSteps));
    for (int step = 0; step < kSteps; ++step) {
      EXPECT_GT(after.norms[step], 0.0);
      EXPECT_EQ(during.norms[step], after.norms[step]) << "step " << step + 1;
      EXPECT_EQ(during.losses[step], after.losses[step]) << "step " << step + 1;
    }
    // The whole-model gradient shard is no longer resident, and the step's peak drops too.
    EXPECT_GE(after.resident_bytes - during.resident_bytes, after.grad_shard_bytes);
    EXPECT_LT(during.peak_bytes, after.peak_bytes);
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, OptimizerInBackwardTest,
                         ::testing::Combine(::testing::Values(1, 2, 3), ::testing::Bool()));

TEST(OptimizerInBackwardTest, TransientGradientShardsRefuseThePathsThatWouldLoseGradients) {
  testing::RunRanks(1, [&](Communicator& communicator) {
    CpuBackend backend;
    auto model = MiniLLM::Create(TinyConfig(), 1, kSeq, &backend);
    ASSERT_TRUE(model.ok()) << model.status();
    FsdpOptions options;
    options.transient_grad_shards = true;
    auto state = FsdpState::Create((*model)->units(), &backend, &communicator, options);
    ASSERT_TRUE(state.ok()) << state.status();
    EXPECT_EQ((*state)->shard(0).grad, nullptr);
    auto optimizer = ShardedAdamW::Create(&backend, &communicator, state->get());
    ASSERT_TRUE(optimizer.ok()) << optimizer.status();
    std::vector<int32_t> tokens(kSeq, 1);
    auto loss = (*state)->ForwardBackward(**model, tokens.data(), tokens.data());
    EXPECT_EQ(loss.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(loss.status().message().find("consumer"), std::string::npos) << loss.status();
    auto norm = (*optimizer)->Step(ParamsAt(1), 1.0);
    EXPECT_EQ(norm.status().code(), absl::StatusCode::kFailedPrecondition);
    // A shard handed over outside a begun step is refused, not applied with stale parameters.
    EXPECT_EQ(
        (*optimizer)->ConsumeGradientShard(0, (*state)->shard(0), backend.compute_stream()).code(),
        absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ((*optimizer)->FinishBackwardStep().status().code(),
              absl::StatusCode::kFailedPrecondition);
  });
}

}  // namespace
}  // namespace fsdpd
