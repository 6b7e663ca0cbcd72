// The sharded optimizer against a direct, unsharded implementation of PyTorch's AdamW and
// clip_grad_norm_, at several world sizes with unit sizes that do not divide evenly.
#include <cmath>
#include <cstring>
#include <mutex>
#include <vector>

#include "gtest/gtest.h"
#include "tests/unit/engine_test_support.h"
#include "worker/backend/cpu_backend.h"
#include "worker/fsdp/fsdp_state.h"
#include "worker/optim/sharded_adamw.h"

namespace fsdpd {
namespace {

std::vector<UnitLayout> Units() {
  std::vector<UnitLayout> units;
  for (int64_t numel : {10, 7, 1, 33}) {
    UnitLayout unit;
    unit.name = absl::StrCat("unit", units.size());
    unit.numel = numel;
    unit.parameters.push_back(ParameterInfo{unit.name + ".weight", {numel}, 0, numel});
    units.push_back(unit);
  }
  return units;
}

float Initial(int unit, int64_t i) { return std::sin(1.0f + unit * 31 + i) * 0.5f; }
float Gradient(int step, int unit, int64_t i) {
  return std::cos(0.7f * step + unit * 13 + i * 0.37f) * (1.0f + 0.5f * step);
}

// Every unit's master set to Initial on this rank's state.
void LoadInitial(FsdpState& state, const std::vector<UnitLayout>& units) {
  for (size_t u = 0; u < units.size(); ++u) {
    std::vector<float> initial(units[u].numel);
    for (int64_t i = 0; i < units[u].numel; ++i) initial[i] = Initial(u, i);
    ASSERT_TRUE(state.LoadMasterFromHost(u, initial).ok());
  }
}

// Each rank holds its slice of the (already averaged) gradient of `step`; padding holds zeros.
void FillGradients(FsdpState& state, const std::vector<UnitLayout>& units, int step) {
  for (size_t u = 0; u < units.size(); ++u) {
    UnitShard& shard = state.shard(u);
    float* grad = shard.Grad().as<float>();
    for (int64_t i = 0; i < shard.layout.shard_numel; ++i) {
      const int64_t global = shard.layout.shard_offset + i;
      grad[i] = global < units[u].numel ? Gradient(step, u, global) : 0.0f;
    }
  }
}

AdamWParams StepParams(int step) {
  AdamWParams p;
  p.lr = 0.05;
  p.weight_decay = 0.1;
  p.step = step;
  return p;
}

struct Reference {
  std::vector<std::vector<double>> param, m, v;
};

// torch.nn.utils.clip_grad_norm_ and torch.optim.AdamW, written out.
double ReferenceStep(Reference& state, std::vector<std::vector<double>> grads, const AdamWParams& p,
                     double max_norm) {
  double sum = 0.0;
  for (const auto& g : grads) {
    for (double x : g) sum += x * x;
  }
  const double norm = std::sqrt(sum);
  const double coefficient = max_norm > 0 ? std::min(1.0, max_norm / (norm + 1e-6)) : 1.0;
  for (size_t u = 0; u < grads.size(); ++u) {
    for (size_t i = 0; i < grads[u].size(); ++i) {
      const double g = grads[u][i] * coefficient;
      double& w = state.param[u][i];
      w *= 1.0 - p.lr * p.weight_decay;
      state.m[u][i] = p.beta1 * state.m[u][i] + (1 - p.beta1) * g;
      state.v[u][i] = p.beta2 * state.v[u][i] + (1 - p.beta2) * g * g;
      const double bias1 = 1 - std::pow(p.beta1, p.step);
      const double bias2 = 1 - std::pow(p.beta2, p.step);
      const double denominator = std::sqrt(state.v[u][i]) / std::sqrt(bias2) + p.eps;
      w -= p.lr / bias1 * state.m[u][i] / denominator;
    }
  }
  return norm;
}

class ShardedAdamWTest : public ::testing::TestWithParam<std::tuple<int, double>> {};

TEST_P(ShardedAdamWTest, MatchesUnshardedAdamWWithGlobalClipping) {
  const auto [world, max_norm] = GetParam();
  const std::vector<UnitLayout> units = Units();
  Reference reference;
  for (size_t u = 0; u < units.size(); ++u) {
    reference.param.emplace_back(units[u].numel);
    reference.m.emplace_back(units[u].numel, 0.0);
    reference.v.emplace_back(units[u].numel, 0.0);
    for (int64_t i = 0; i < units[u].numel; ++i) reference.param[u][i] = Initial(u, i);
  }
  constexpr int kSteps = 4;
  std::vector<double> reference_norms;
  for (int step = 1; step <= kSteps; ++step) {
    std::vector<std::vector<double>> grads(units.size());
    for (size_t u = 0; u < units.size(); ++u) {
      for (int64_t i = 0; i < units[u].numel; ++i) grads[u].push_back(Gradient(step, u, i));
    }
    reference_norms.push_back(ReferenceStep(reference, grads, StepParams(step), max_norm));
  }

  std::mutex mutex;
  testing::RunRanks(world, [&](Communicator& communicator) {
    CpuBackend backend;
    FsdpOptions options;
    auto state = FsdpState::Create(units, &backend, &communicator, options);
    ASSERT_TRUE(state.ok()) << state.status();
    LoadInitial(**state, units);
    auto optimizer = ShardedAdamW::Create(&backend, &communicator, state->get());
    ASSERT_TRUE(optimizer.ok());
    for (int step = 1; step <= kSteps; ++step) {
      FillGradients(**state, units, step);
      auto norm = (*optimizer)->Step(StepParams(step), max_norm);
      ASSERT_TRUE(norm.ok()) << norm.status();
      EXPECT_NEAR(*norm, reference_norms[step - 1], 1e-5 * reference_norms[step - 1]);
    }
    for (size_t u = 0; u < units.size(); ++u) {
      const UnitShard& shard = (*state)->shard(u);
      for (int64_t i = shard.layout.valid_shard_numel; i < shard.layout.shard_numel; ++i) {
        EXPECT_EQ(shard.Master().as<float>()[i], 0.0f) << "padding changed in unit " << u;
        EXPECT_EQ(shard.ExpAvg().as<float>()[i], 0.0f);
      }
      std::vector<float> gathered;
      ASSERT_TRUE((*state)->GatherMasterToHost(u, &gathered).ok());
      ASSERT_EQ(gathered.size(), reference.param[u].size());
      std::lock_guard<std::mutex> lock(mutex);
      for (size_t i = 0; i < gathered.size(); ++i) {
        EXPECT_NEAR(gathered[i], reference.param[u][i], 2e-6)
            << "world " << world << " unit " << u << " index " << i;
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(WorldsAndClipping, ShardedAdamWTest,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4),
                                            ::testing::Values(0.0, 1.0)));

// A master split in halves (FsdpOptions::split_master) at world sizes 1-3: the same steps and
// norms as the fp32 master to the bit, the same values through the checkpoint's copies, its
// padding untouched, and a state that would have no bf16 parameters to split refused.
TEST(ShardedAdamWSplitMasterTest, TakesTheFp32MastersStepsToTheBit) {
  const std::vector<UnitLayout> units = Units();
  for (int world : {1, 2, 3}) {
    std::vector<std::vector<float>> finals[2];
    std::vector<double> norms[2];
    std::mutex mutex;
    for (int split = 0; split < 2; ++split) {
      testing::RunRanks(world, [&](Communicator& communicator) {
        CpuBackend backend;
        FsdpOptions options;
        options.split_master = split == 1;
        options.param_storage_dtype = split == 1 ? DType::kBF16 : DType::kF32;
        auto state = FsdpState::Create(units, &backend, &communicator, options);
        ASSERT_TRUE(state.ok()) << state.status();
        LoadInitial(**state, units);
        auto optimizer = ShardedAdamW::Create(&backend, &communicator, state->get());
        ASSERT_TRUE(optimizer.ok());
        for (int step = 1; step <= 4; ++step) {
          FillGradients(**state, units, step);
          auto norm = (*optimizer)->Step(StepParams(step), 1.0);
          ASSERT_TRUE(norm.ok()) << norm.status();
          if (communicator.rank() == 0) norms[split].push_back(*norm);
        }
        for (size_t u = 0; u < units.size(); ++u) {
          UnitShard& shard = (*state)->shard(u);
          ASSERT_EQ(shard.split_master(), split == 1);
          std::vector<float> slice(static_cast<size_t>(shard.layout.shard_numel), -1.0f);
          ASSERT_TRUE((*state)->CopyMasterShardToHost(u, slice.data()).ok());
          for (int64_t i = shard.layout.valid_shard_numel; i < shard.layout.shard_numel; ++i) {
            EXPECT_EQ(slice[i], 0.0f) << "padding changed in unit " << u;
          }
          // Back through the checkpoint's path: the same values come out again.
          ASSERT_TRUE((*state)->CopyMasterShardFromHost(u, slice.data()).ok());
          std::vector<float> gathered;
          ASSERT_TRUE((*state)->GatherMasterToHost(u, &gathered).ok());
          if (communicator.rank() == 0) {
            std::lock_guard<std::mutex> lock(mutex);
            finals[split].push_back(gathered);
          }
        }
      });
    }
    ASSERT_EQ(finals[1].size(), finals[0].size());
    for (size_t u = 0; u < finals[0].size(); ++u) {
      ASSERT_EQ(finals[1][u].size(), finals[0][u].size());
      for (size_t i = 0; i < finals[0][u].size(); ++i) {
        uint32_t plain_bits, split_bits;
        std::memcpy(&plain_bits, &finals[0][u][i], 4);
        std::memcpy(&split_bits, &finals[1][u][i], 4);
        ASSERT_EQ(split_bits, plain_bits) << "world " << world << " unit " << u << " at " << i;
      }
    }
    EXPECT_EQ(norms[1], norms[0]) << "world " << world;
  }
  testing::RunRanks(1, [&](Communicator& communicator) {
    CpuBackend backend;
    FsdpOptions options;
    options.split_master = true;  // fp32 parameter storage: nothing to split into
    auto state = FsdpState::Create(units, &backend, &communicator, options);
    EXPECT_EQ(state.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(state.status().message().find("bf16 parameter storage"), std::string::npos);
  });
}

// A checkpoint holds fp32 values whatever the layout: a rank's shard saved from one layout and
// loaded into the other (an upgrade resuming an older job's checkpoint, or FSDPD_MASTER_LAYOUT
// changed between attempts) comes back bit for bit, at 1-3 ranks.
TEST(ShardedAdamWSplitMasterTest, AShardSavedFromOneLayoutLoadsIntoTheOther) {
  const std::vector<UnitLayout> units = Units();
  for (int world : {1, 2, 3}) {
    testing::RunRanks(world, [&](Communicator& communicator) {
      CpuBackend backend;
      FsdpOptions fp32;
      FsdpOptions split;
      split.split_master = true;
      split.param_storage_dtype = DType::kBF16;
      for (const auto& [from, to] : {std::pair<FsdpOptions, FsdpOptions>{fp32, split},
                                     std::pair<FsdpOptions, FsdpOptions>{split, fp32}}) {
        auto source = FsdpState::Create(units, &backend, &communicator, from);
        auto target = FsdpState::Create(units, &backend, &communicator, to);
        ASSERT_TRUE(source.ok() && target.ok());
        LoadInitial(**source, units);
        for (size_t u = 0; u < units.size(); ++u) {
          // What the checkpoint's file holds for this rank, written by one and read by the other.
          std::vector<float> saved(static_cast<size_t>((*source)->shard(u).layout.shard_numel));
          ASSERT_TRUE((*source)->CopyMasterShardToHost(u, saved.data()).ok());
          ASSERT_TRUE((*target)->CopyMasterShardFromHost(u, saved.data()).ok());
          std::vector<float> expected, loaded;
          ASSERT_TRUE((*source)->GatherMasterToHost(u, &expected).ok());
          ASSERT_TRUE((*target)->GatherMasterToHost(u, &loaded).ok());
          ASSERT_EQ(loaded.size(), expected.size());
          EXPECT_EQ(std::memcmp(loaded.data(), expected.data(), loaded.size() * sizeof(float)), 0)
              << "world " << world << " unit " << u;
        }
      }
    });
  }
}

}  // namespace
}  // namespace fsdpd
