// The Llama model's shape in FSDP units, its initialisation, what Create refuses, and activation
// recompute (which must change no bit, as for MiniLLM: tests/unit/model_recompute_test.cc).
// Its numbers against transformers are tests/unit/model_llama_golden_test.cc's.
#include <cmath>
#include <cstring>
#include <string>
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

ModelConfig TinyLlama(bool tied) {
  ModelConfig config;
  config.arch = ModelArch::kLlama;
  config.vocab = 29;
  config.dim = 16;
  config.layers = 3;
  config.heads = 4;
  config.kv_heads = 2;
  config.ffn_hidden = 24;
  config.causal = true;
  config.final_norm = true;
  config.norm_eps = 1e-5;
  config.rope_theta = 100.0;
  config.tie_embeddings = tied;
  return config;
}

TEST(ModelLlamaTest, UnitsHoldHuggingFacesNamesWithPackedQkvAndGateUp) {
  const std::vector<UnitLayout> units = BuildUnitLayouts(TinyLlama(/*tied=*/false));
  ASSERT_EQ(units.size(), 4u);
  EXPECT_EQ(units[1].name, "model.layers.1");
  std::vector<std::string> names;
  for (const ParameterInfo& info : units[1].parameters) names.push_back(info.name);
  const std::string p = "model.layers.1.";
  EXPECT_EQ(names,
            (std::vector<std::string>{
                p + "input_layernorm.weight", p + "self_attn.q_proj.weight",
                p + "self_attn.k_proj.weight", p + "self_attn.v_proj.weight",
                p + "self_attn.o_proj.weight", p + "post_attention_layernorm.weight",
                p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight", p + "mlp.down_proj.weight"}));
  // q, k and v follow each other, so one [(4 + 2·2)·4, 16] matrix from q_proj's offset is the
  // packed qkv weight; gate and up likewise make one [2·24, 16] matrix.
  const UnitLayout& block = units[1];
  const ParameterInfo& q = block.Find(p + "self_attn.q_proj.weight");
  EXPECT_EQ(q.shape, (std::vector<int64_t>{16, 16}));
  EXPECT_EQ(block.Find(p + "self_attn.k_proj.weight").shape, (std::vector<int64_t>{8, 16}));
  EXPECT_EQ(block.Find(p + "self_attn.k_proj.weight").offset, q.offset + 16 * 16);
  EXPECT_EQ(block.Find(p + "self_attn.v_proj.weight").offset, q.offset + 16 * 16 + 8 * 16);
  const ParameterInfo& gate = block.Find(p + "mlp.gate_proj.weight");
  EXPECT_EQ(block.Find(p + "mlp.up_proj.weight").offset, gate.offset + 24 * 16);
  EXPECT_EQ(block.Find(p + "mlp.down_proj.weight").shape, (std::vector<int64_t>{16, 24}));
  std::vector<std::string> root;
  for (const ParameterInfo& info : units[3].parameters) root.push_back(info.name);
  EXPECT_EQ(root, (std::vector<std::string>{"model.embed_tokens.weight", "model.norm.weight",
                                            "lm_head.weight"}));
  // Tied: the head is the embedding, so there is no lm_head.weight.
  const std::vector<UnitLayout> tied = BuildUnitLayouts(TinyLlama(/*tied=*/true));
  ASSERT_EQ(tied.back().parameters.size(), 2u);
  EXPECT_EQ(tied.back().numel, 29 * 16 + 16);
}

TEST(ModelLlamaTest, InitialisationIsHuggingFaces) {
  const ModelConfig config = TinyLlama(false);
  const std::vector<UnitLayout> units = BuildUnitLayouts(config);
  for (int u = 0; u < static_cast<int>(units.size()); ++u) {
    std::vector<float> values(static_cast<size_t>(units[u].numel));
    InitializeUnit(config, units[u], u, 7, values.data());
    std::vector<float> again(values.size());
    InitializeUnit(config, units[u], u, 7, again.data());
    EXPECT_EQ(values, again) << "deterministic in (seed, unit)";
    for (const ParameterInfo& info : units[u].parameters) {
      const float* first = values.data() + info.offset;
      const bool norm = info.name.find("norm") != std::string::npos;
      double sum = 0.0, squares = 0.0;
      for (int64_t i = 0; i < info.numel; ++i) {
        if (norm) EXPECT_EQ(first[i], 1.0f) << info.name;
        sum += first[i];
        squares += static_cast<double>(first[i]) * first[i];
      }
      if (norm) continue;
      // N(0, 0.02): over these ≥ 128 values (seed 7) the sample deviation is within 15 % of
      // 0.02 and the mean near 0; U(±1/√fan_in), PyTorch's default, would be 0.14 here.
      const double mean = sum / info.numel;
      const double deviation = std::sqrt(squares / info.numel - mean * mean);
      EXPECT_NEAR(deviation, 0.02, 0.003) << info.name;
      EXPECT_LT(std::fabs(mean), 0.005) << info.name;
    }
  }
}

TEST(ModelLlamaTest, CreateRefusesWhatRotaryAndGroupedAttentionCannotRun) {
  CpuBackend backend;
  ModelConfig odd = TinyLlama(false);
  odd.heads = 16;  // head_dim 1
  odd.kv_heads = 16;
  auto model = MiniLLM::Create(odd, 1, 4, &backend);
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(model.status().message().find("even head_dim"), std::string::npos) << model.status();
  ModelConfig groups = TinyLlama(false);
  groups.kv_heads = 3;
  model = MiniLLM::Create(groups, 1, 4, &backend);
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(model.status().message().find("kv_heads dividing heads"), std::string::npos);
}

struct Trained {
  std::vector<float> losses;
  std::vector<std::vector<float>> weights;
};

// Three AdamW steps on one batch through FsdpState, at `world` ranks splitting the batch.
Trained Train(ModelConfig config, ActivationRecompute recompute, int world) {
  constexpr int64_t kGlobalBatch = 4, kSeq = 8;
  config.activation_recompute = recompute;
  std::vector<int32_t> tokens(kGlobalBatch * kSeq), targets(kGlobalBatch * kSeq);
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<int32_t>((i * 5 + 1) % config.vocab);
    targets[i] = static_cast<int32_t>((i * 3 + 2) % config.vocab);
  }
  Trained trained;
  testing::RunRanks(world, [&](Communicator& communicator) {
    CpuBackend backend;
    const int64_t batch = kGlobalBatch / world;
    auto model = MiniLLM::Create(config, batch, kSeq, &backend);
    ASSERT_TRUE(model.ok()) << model.status();
    auto state = FsdpState::Create((*model)->units(), &backend, &communicator, FsdpOptions{});
    ASSERT_TRUE(state.ok()) << state.status();
    ASSERT_TRUE(InitializeWeightsFromSeed(config, 3, **state).ok());
    auto optimizer = ShardedAdamW::Create(&backend, &communicator, state->get());
    ASSERT_TRUE(optimizer.ok()) << optimizer.status();
    const int64_t offset = communicator.rank() * batch * kSeq;
    std::vector<float> losses;
    for (int step = 1; step <= 3; ++step) {
      auto loss =
          (*state)->ForwardBackward(**model, tokens.data() + offset, targets.data() + offset);
      ASSERT_TRUE(loss.ok()) << loss.status();
      losses.push_back(*loss);
      AdamWParams params;
      params.lr = 1e-2;
      params.step = step;
      ASSERT_TRUE((*optimizer)->Step(params, 0.0).ok());
    }
    std::vector<std::vector<float>> weights;
    for (int unit = 0; unit < (*state)->num_units(); ++unit) {
      std::vector<float> values;
      ASSERT_TRUE((*state)->GatherMasterToHost(unit, &values).ok());
      weights.push_back(std::move(values));
    }
    if (communicator.rank() == 0) {
      trained.losses = losses;
      trained.weights = std::move(weights);
    }
  });
  return trained;
}

class ModelLlamaTrainingTest : public ::testing::TestWithParam<bool> {};

TEST_P(ModelLlamaTrainingTest, RecomputeChangesNoBit) {
  const ModelConfig config = TinyLlama(GetParam());
  const Trained none = Train(config, ActivationRecompute::kNone, 1);
  ASSERT_EQ(none.losses.size(), 3u);
  EXPECT_LT(none.losses.back(), none.losses.front()) << "the tiny model must learn";
  for (ActivationRecompute recompute : {ActivationRecompute::kFfn, ActivationRecompute::kBlock}) {
    const Trained other = Train(config, recompute, 1);
    EXPECT_EQ(other.losses, none.losses);
    ASSERT_EQ(other.weights.size(), none.weights.size());
    for (size_t u = 0; u < none.weights.size(); ++u) {
      EXPECT_EQ(std::memcmp(other.weights[u].data(), none.weights[u].data(),
                            none.weights[u].size() * sizeof(float)),
                0)
          << "unit " << u;
    }
  }
}

// Sharded over two ranks (each with half the batch), the weights follow the one-rank run to fp32
// rounding: the reduce-scatter averages what one rank sums (tests/unit/engine_fsdp_test.cc).
TEST_P(ModelLlamaTrainingTest, TwoRanksFollowOne) {
  const ModelConfig config = TinyLlama(GetParam());
  const Trained one = Train(config, ActivationRecompute::kNone, 1);
  const Trained two = Train(config, ActivationRecompute::kNone, 2);
  ASSERT_EQ(two.weights.size(), one.weights.size());
  for (size_t u = 0; u < one.weights.size(); ++u) {
    ASSERT_EQ(two.weights[u].size(), one.weights[u].size());
    double largest = 0.0;
    for (size_t i = 0; i < one.weights[u].size(); ++i) {
      largest =
          std::max(largest, std::fabs(static_cast<double>(two.weights[u][i]) - one.weights[u][i]));
    }
    // AdamW moves each weight by about lr = 1e-2 a step; rounding-level differences in the
    // gradient stay far below 1e-4 of that after three steps.
    EXPECT_LT(largest, 1e-5) << "unit " << u;
  }
}

INSTANTIATE_TEST_SUITE_P(UntiedAndTied, ModelLlamaTrainingTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Tied" : "Untied";
                         });

}  // namespace
}  // namespace fsdpd
