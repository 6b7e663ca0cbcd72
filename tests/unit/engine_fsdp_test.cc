// FSDP's forward/backward on real MiniLLM units: at world 2 and 3 (units that do not divide
// evenly), with each rank holding its part of the global batch, the reduce-scattered gradient
// shards must put together the world-1 gradient of the whole batch, and the mean loss must be
// the same; with and without resharding after forward.
#include <algorithm>
#include <cmath>
#include <mutex>
#include <vector>

#include "gtest/gtest.h"
#include "tests/unit/engine_test_support.h"
#include "worker/backend/cpu_backend.h"
#include "worker/fsdp/fsdp_state.h"
#include "worker/model/minillm.h"
#include "worker/trainer_weights.h"

namespace fsdpd {
namespace {

constexpr int64_t kGlobalBatch = 6;
constexpr int64_t kSeq = 8;

ModelConfig TinyConfig() {
  ModelConfig config;
  config.vocab = 37;
  config.dim = 16;
  config.layers = 4;  // enough for gathers issued up to three units ahead
  config.heads = 2;
  config.ffn_hidden = 24;
  return config;
}

struct StepResult {
  double loss = 0.0;
  std::vector<std::vector<float>> gradients;  // per unit, unpadded
};

StepResult RunStep(int world, const FsdpOptions& options) {
  const ModelConfig config = TinyConfig();
  std::vector<int32_t> tokens(kGlobalBatch * kSeq), targets(kGlobalBatch * kSeq);
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<int32_t>((i * 7 + 3) % config.vocab);
    targets[i] = static_cast<int32_t>((i * 11 + 5) % config.vocab);
  }
  StepResult result;
  std::mutex mutex;
  testing::RunRanks(world, [&](Communicator& communicator) {
    CpuBackend backend;
    const int64_t batch = kGlobalBatch / world;
    auto model = MiniLLM::Create(config, batch, kSeq, &backend);
    ASSERT_TRUE(model.ok()) << model.status();
    auto state = FsdpState::Create((*model)->units(), &backend, &communicator, options);
    ASSERT_TRUE(state.ok()) << state.status();
    ASSERT_TRUE(InitializeWeightsFromSeed(config, 11, **state).ok());
    const int64_t offset = communicator.rank() * batch * kSeq;
    const int64_t bytes_before = backend.memory_stats().current_bytes;
    auto loss = (*state)->ForwardBackward(**model, tokens.data() + offset, targets.data() + offset);
    ASSERT_TRUE(loss.ok()) << loss.status();
    // Every gathered unit and unsharded gradient was freed again; they did exist meanwhile.
    EXPECT_EQ(backend.memory_stats().current_bytes, bytes_before);
    EXPECT_GT(backend.memory_stats().peak_bytes, bytes_before);
    std::vector<float> mean_loss = {*loss};
    Tensor loss_tensor{mean_loss.data(), DType::kF32, {1}};
    ASSERT_TRUE(
        communicator.AllReduce(loss_tensor, ReduceOp::kAverage, backend.compute_stream()).ok());
    std::vector<std::vector<float>> gradients;
    for (int unit = 0; unit < (*state)->num_units(); ++unit) {
      UnitShard& shard = (*state)->shard(unit);
      std::vector<float> full(shard.layout.padded_numel);
      Tensor full_tensor{full.data(), DType::kF32, {shard.layout.padded_numel}};
      ASSERT_TRUE(communicator.AllGather(shard.Grad(), full_tensor, backend.comm_stream()).ok());
      for (int64_t i = shard.layout.numel; i < shard.layout.padded_numel; ++i) {
        ASSERT_EQ(full[i], 0.0f) << "padding gradient must be zero";
      }
      full.resize(shard.layout.numel);
      gradients.push_back(std::move(full));
    }
    if (communicator.rank() == 0) {
      std::lock_guard<std::mutex> lock(mutex);
      result.loss = mean_loss[0];
      result.gradients = std::move(gradients);
    }
  });
  return result;
}

void ExpectSameGradients(const StepResult& actual, const StepResult& expected,
                         const std::string& label) {
  EXPECT_NEAR(actual.loss, expected.loss, 1e-6) << label;
  ASSERT_EQ(actual.gradients.size(), expected.gradients.size());
  for (size_t unit = 0; unit < expected.gradients.size(); ++unit) {
    ASSERT_EQ(actual.gradients[unit].size(), expected.gradients[unit].size());
    float largest = 0.0f;
    for (float g : expected.gradients[unit]) largest = std::max(largest, std::abs(g));
    ASSERT_GT(largest, 0.0f) << "unit " << unit << " got no gradient";
    for (size_t i = 0; i < expected.gradients[unit].size(); ++i) {
      ASSERT_NEAR(actual.gradients[unit][i], expected.gradients[unit][i], 1e-5f * largest)
          << label << " unit " << unit << " element " << i;
    }
  }
}

TEST(FsdpStateTest, ShardedGradientsAtAnyWorldSizeEqualTheWholeBatchGradient) {
  FsdpOptions options;
  const StepResult single = RunStep(1, options);
  ExpectSameGradients(RunStep(2, options), single, "world 2");
  ExpectSameGradients(RunStep(3, options), single, "world 3");
  options.reshard_after_forward = false;
  ExpectSameGradients(RunStep(2, options), single, "world 2 without reshard");
  options.reshard_after_forward = true;
  options.prefetch_units = 2;
  ExpectSameGradients(RunStep(2, options), single, "world 2, gathers two units ahead");
  options.prefetch_units = 3;
  ExpectSameGradients(RunStep(3, options), single, "world 3, gathers three units ahead");
}

// The root's gather issued at the end of a step is what the next step's forward uses; a master
// loaded from the host afterwards replaces it (a restore must never train on stale weights).
TEST(FsdpStateTest, ThePrefetchedRootIsUsedUnlessALoadedMasterReplacesIt) {
  const ModelConfig config = TinyConfig();
  std::vector<int32_t> tokens(kGlobalBatch * kSeq), targets(kGlobalBatch * kSeq);
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<int32_t>((i * 5 + 1) % config.vocab);
    targets[i] = static_cast<int32_t>((i * 13 + 2) % config.vocab);
  }
  testing::RunRanks(1, [&](Communicator& communicator) {
    CpuBackend backend;
    auto model = MiniLLM::Create(config, kGlobalBatch, kSeq, &backend);
    ASSERT_TRUE(model.ok()) << model.status();
    auto make_state = [&]() {
      auto state = FsdpState::Create((*model)->units(), &backend, &communicator, FsdpOptions{});
      EXPECT_TRUE(state.ok()) << state.status();
      EXPECT_TRUE(InitializeWeightsFromSeed(config, 11, **state).ok());
      return std::move(*state);
    };
    std::unique_ptr<FsdpState> state = make_state();
    const int root = state->num_units() - 1;
    auto loss = [&](FsdpState& s) {
      absl::StatusOr<float> value = s.ForwardBackward(**model, tokens.data(), targets.data());
      EXPECT_TRUE(value.ok()) << value.status();
      return value.value_or(-1.0f);
    };
    const float first = loss(*state);
    const int64_t bytes_before = backend.memory_stats().current_bytes;
    ASSERT_TRUE(state->PrefetchRootForNextStep().ok());
    EXPECT_GT(backend.memory_stats().current_bytes, bytes_before) << "the root was gathered";
    EXPECT_EQ(loss(*state), first);
    EXPECT_EQ(backend.memory_stats().current_bytes, bytes_before) << "and freed after the head";

    ASSERT_TRUE(state->PrefetchRootForNextStep().ok());
    std::vector<float> values;
    ASSERT_TRUE(state->GatherMasterToHost(root, &values).ok());
    for (float& v : values) v *= 0.5f;
    ASSERT_TRUE(state->LoadMasterFromHost(root, values).ok());
    const float after_load = loss(*state);
    EXPECT_NE(after_load, first);
    std::unique_ptr<FsdpState> fresh = make_state();
    ASSERT_TRUE(fresh->LoadMasterFromHost(root, values).ok());
    EXPECT_EQ(after_load, loss(*fresh));
  });
}

// InitializeWeightsFromSeed fills units on threads, in waves of at most eight: with more units
// than that (19 blocks and the root), every unit still holds exactly what its own generator
// draws, one unit at a time, on each rank's shard.
TEST(FsdpStateTest, WeightsInitialisedOnThreadsAreEachUnitsOwnDraw) {
  ModelConfig config = TinyConfig();
  config.layers = 19;
  testing::RunRanks(2, [&](Communicator& communicator) {
    CpuBackend backend;
    auto model = MiniLLM::Create(config, 1, kSeq, &backend);
    ASSERT_TRUE(model.ok()) << model.status();
    auto state = FsdpState::Create((*model)->units(), &backend, &communicator, FsdpOptions{});
    ASSERT_TRUE(state.ok()) << state.status();
    ASSERT_TRUE(InitializeWeightsFromSeed(config, 5, **state).ok());
    for (int unit = 0; unit < (*state)->num_units(); ++unit) {
      const UnitLayout& parameters = (*state)->unit(unit);
      const FlatShardLayout& layout = (*state)->shard(unit).layout;
      std::vector<float> expected(static_cast<size_t>(parameters.numel));
      InitializeUnit(config, parameters, unit, 5, expected.data());
      std::vector<float> shard(static_cast<size_t>(layout.shard_numel));
      ASSERT_TRUE((*state)->CopyMasterShardToHost(unit, shard.data()).ok());
      const int64_t begin = communicator.rank() * layout.shard_numel;
      for (int64_t i = 0; i < layout.shard_numel && begin + i < parameters.numel; ++i) {
        ASSERT_EQ(shard[static_cast<size_t>(i)], expected[static_cast<size_t>(begin + i)])
            << "unit " << unit << " value " << begin + i << " on rank " << communicator.rank();
      }
    }
  });
}

// A split master is loaded from fp32 values in slices on threads once a shard holds more than
// 2 · 2^22 values: a 9.6M-parameter block comes back to the bit, whatever the slice borders.
TEST(FsdpStateTest, ALargeSplitMasterLoadedOnThreadsReadsBackExactly) {
  ModelConfig config = TinyConfig();
  config.dim = 896;
  config.heads = 8;
  config.ffn_hidden = 4 * 896;
  config.layers = 1;
  testing::RunRanks(1, [&](Communicator& communicator) {
    CpuBackend backend;
    auto model = MiniLLM::Create(config, 1, kSeq, &backend);
    ASSERT_TRUE(model.ok()) << model.status();
    FsdpOptions options;
    options.split_master = true;
    options.param_storage_dtype = DType::kBF16;
    auto state = FsdpState::Create((*model)->units(), &backend, &communicator, options);
    ASSERT_TRUE(state.ok()) << state.status();
    const int block = 0;
    ASSERT_TRUE((*state)->shard(block).split_master());
    const int64_t numel = (*state)->unit(block).numel;
    ASSERT_GT(numel, int64_t{2} << 22);
    std::vector<float> values(static_cast<size_t>(numel));
    for (int64_t i = 0; i < numel; ++i) {
      values[static_cast<size_t>(i)] =
          std::ldexp(static_cast<float>(i % 8191) - 4095.5f, -(i % 37));
    }
    ASSERT_TRUE((*state)->LoadMasterFromHost(block, values).ok());
    std::vector<float> back(static_cast<size_t>((*state)->shard(block).layout.shard_numel));
    ASSERT_TRUE((*state)->CopyMasterShardToHost(block, back.data()).ok());
    for (int64_t i = 0; i < numel; ++i) {
      ASSERT_EQ(back[static_cast<size_t>(i)], values[static_cast<size_t>(i)]) << "value " << i;
    }
  });
}

TEST(FsdpStateTest, Bf16ParametersChangeTheLossButNotItsWorldInvariance) {
  FsdpOptions bf16;
  bf16.round_params_to_bf16 = true;
  const StepResult fp32 = RunStep(1, FsdpOptions{});
  const StepResult single = RunStep(1, bf16);
  EXPECT_NE(single.loss, fp32.loss) << "rounding the gathered parameters must show";
  EXPECT_NEAR(single.loss, fp32.loss, 1e-2);
  ExpectSameGradients(RunStep(2, bf16), single, "bf16 world 2");
}

}  // namespace
}  // namespace fsdpd
