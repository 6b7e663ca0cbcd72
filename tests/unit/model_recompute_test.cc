// Activation recompute (none, ffn, block) runs the same kernels on the same inputs, so on the
// CPU backend it must change no bit: losses and weights after several training steps are
// identical, with the causal mask and the final norm too. What it must change is the memory
// the model keeps: the workspace shrinks by exactly the tensors no longer kept.
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
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

constexpr int64_t kBatch = 2;
constexpr int64_t kSeq = 8;
constexpr int kSteps = 3;

ModelConfig TinyConfig(bool causal_with_final_norm) {
  ModelConfig config;
  config.vocab = 29;
  config.dim = 16;
  config.layers = 3;
  config.heads = 2;
  config.ffn_hidden = 40;
  config.causal = causal_with_final_norm;
  config.final_norm = causal_with_final_norm;
  return config;
}

struct Trained {
  std::vector<float> losses;
  std::vector<std::vector<float>> weights;
  int64_t model_bytes = 0;  // what MiniLLM::Create allocated
};

Trained Train(ModelConfig config, ActivationRecompute recompute) {
  config.activation_recompute = recompute;
  Trained trained;
  testing::RunRanks(1, [&](Communicator& communicator) {
    CpuBackend backend;
    auto model = MiniLLM::Create(config, kBatch, kSeq, &backend);
    ASSERT_TRUE(model.ok()) << model.status();
    trained.model_bytes = backend.memory_stats().current_bytes;
    auto state = FsdpState::Create((*model)->units(), &backend, &communicator, FsdpOptions{});
    ASSERT_TRUE(state.ok()) << state.status();
    ASSERT_TRUE(InitializeWeightsFromSeed(config, 3, **state).ok());
    auto optimizer = ShardedAdamW::Create(&backend, &communicator, state->get());
    ASSERT_TRUE(optimizer.ok()) << optimizer.status();
    // One batch over and over, so that the loss must fall.
    std::vector<int32_t> tokens(kBatch * kSeq), targets(kBatch * kSeq);
    for (size_t i = 0; i < tokens.size(); ++i) {
      tokens[i] = static_cast<int32_t>((i * 5 + 1) % config.vocab);
      targets[i] = static_cast<int32_t>((i * 3 + 2) % config.vocab);
    }
    for (int step = 1; step <= kSteps; ++step) {
      auto loss = (*state)->ForwardBackward(**model, tokens.data(), targets.data());
      ASSERT_TRUE(loss.ok()) << loss.status();
      trained.losses.push_back(*loss);
      AdamWParams params;
      params.lr = 1e-2;
      params.step = step;
      ASSERT_TRUE((*optimizer)->Step(params, 0.0).ok());
    }
    for (int unit = 0; unit < (*state)->num_units(); ++unit) {
      std::vector<float> values;
      ASSERT_TRUE((*state)->GatherMasterToHost(unit, &values).ok());
      trained.weights.push_back(std::move(values));
    }
  });
  return trained;
}

void ExpectBitIdentical(const Trained& actual, const Trained& expected, const char* label) {
  EXPECT_EQ(actual.losses, expected.losses) << label;
  ASSERT_EQ(actual.weights.size(), expected.weights.size()) << label;
  for (size_t unit = 0; unit < expected.weights.size(); ++unit) {
    ASSERT_EQ(actual.weights[unit].size(), expected.weights[unit].size());
    EXPECT_EQ(std::memcmp(actual.weights[unit].data(), expected.weights[unit].data(),
                          expected.weights[unit].size() * sizeof(float)),
              0)
        << label << ": unit " << unit << " differs";
  }
}

class ActivationRecomputeTest : public ::testing::TestWithParam<bool> {};

TEST_P(ActivationRecomputeTest, ChangesNoBitOfTheTraining) {
  const ModelConfig config = TinyConfig(GetParam());
  const Trained none = Train(config, ActivationRecompute::kNone);
  ASSERT_EQ(none.losses.size(), static_cast<size_t>(kSteps));
  EXPECT_LT(none.losses.back(), none.losses.front()) << "the tiny model must learn";
  ExpectBitIdentical(Train(config, ActivationRecompute::kFfn), none, "ffn");
  ExpectBitIdentical(Train(config, ActivationRecompute::kBlock), none, "block");
}

TEST_P(ActivationRecomputeTest, KeepsOnlyWhatItDoesNotRecompute) {
  const ModelConfig config = TinyConfig(GetParam());
  const int64_t none = Train(config, ActivationRecompute::kNone).model_bytes;
  const int64_t ffn = Train(config, ActivationRecompute::kFfn).model_bytes;
  const int64_t block = Train(config, ActivationRecompute::kBlock).model_bytes;
  const int64_t tokens = kBatch * kSeq;
  // fp32 on the CPU; every tensor here is a multiple of the allocator's 64-byte alignment.
  const int64_t hidden = tokens * config.ffn_hidden * 4;
  // ffn: every block's ffn.0 output becomes one shared workspace.
  EXPECT_EQ(none - ffn, (config.layers - 1) * hidden);
  // block: every block's whole set becomes one shared set: the norms' rstd (2 per token), qkv
  // (3·dim), attention (dim), middle (dim) and the log-sum-exp (heads per token).
  const int64_t per_block = tokens * 4 * (2 + 3 * config.dim + config.dim + config.dim) +
                            kBatch * config.heads * kSeq * 4;
  EXPECT_EQ(ffn - block, (config.layers - 1) * per_block);
}

INSTANTIATE_TEST_SUITE_P(SeedAndCausalFinalNorm, ActivationRecomputeTest, ::testing::Bool());

// FP8 products (parallel.matmul_dtype fp8, the CPU's emulation: kernels/cpu/fp8.h): recompute
// reruns the same quantized products, so it changes no bit there either; and the training stays
// near the fp32 products' while differing from them (the products did quantize).
class Fp8TrainingTest : public ::testing::TestWithParam<bool> {};

ModelConfig TinyFp8Config(bool causal_with_final_norm) {
  ModelConfig config = TinyConfig(causal_with_final_norm);
  config.ffn_hidden = 48;  // FP8 wants every dimension a multiple of 16
  return config;
}

TEST_P(Fp8TrainingTest, RecomputeChangesNoBit) {
  ModelConfig config = TinyFp8Config(GetParam());
  config.matmul_dtype = MatmulDtype::kFp8;
  const Trained none = Train(config, ActivationRecompute::kNone);
  ASSERT_EQ(none.losses.size(), static_cast<size_t>(kSteps));
  EXPECT_LT(none.losses.back(), none.losses.front()) << "the tiny model must learn in fp8 too";
  ExpectBitIdentical(Train(config, ActivationRecompute::kFfn), none, "ffn");
  ExpectBitIdentical(Train(config, ActivationRecompute::kBlock), none, "block");
}

TEST_P(Fp8TrainingTest, StaysNearTheBackendsProducts) {
  ModelConfig config = TinyFp8Config(GetParam());
  const Trained exact = Train(config, ActivationRecompute::kNone);
  config.matmul_dtype = MatmulDtype::kFp8;
  const Trained fp8 = Train(config, ActivationRecompute::kNone);
  ASSERT_EQ(fp8.losses.size(), exact.losses.size());
  EXPECT_NE(fp8.losses, exact.losses);
  // Losses near ln(29) ≈ 3.4, from products whose operands are off by up to 2^-4 (e4m3) and
  // 2^-3 (e5m2) relative each: a few tenths of a percent in the loss, 2% is far from a bug's
  // O(1) and from the ~10% the tiny model learns in three steps.
  for (size_t i = 0; i < exact.losses.size(); ++i) {
    EXPECT_NEAR(fp8.losses[i], exact.losses[i], 0.02 * exact.losses[i]) << "step " << i + 1;
  }
}

// The amaxes RMSNorm and SiLU leave for the products that read their outputs (Fp8OperandAmax in
// worker/backend/ops.h) equal what each product would measure itself, so taking them changes no
// bit, under every recompute mode. A producer that left its slot short (a missed raise, a slot
// not zeroed between blocks, the wrong slot read) changes a scale, and with it the bits.
TEST_P(Fp8TrainingTest, ProducersAmaxChangesNoBit) {
  ModelConfig config = TinyFp8Config(GetParam());
  config.matmul_dtype = MatmulDtype::kFp8;
  const std::pair<ActivationRecompute, const char*> modes[] = {
      {ActivationRecompute::kNone, "none"},
      {ActivationRecompute::kFfn, "ffn"},
      {ActivationRecompute::kBlock, "block"}};
  for (const auto& [recompute, name] : modes) {
    ASSERT_EQ(setenv("FSDPD_FP8_AMAX", "separate", 1), 0);
    const Trained separate = Train(config, recompute);
    ASSERT_EQ(unsetenv("FSDPD_FP8_AMAX"), 0);
    const Trained fused = Train(config, recompute);
    ASSERT_EQ(separate.losses.size(), static_cast<size_t>(kSteps));
    ExpectBitIdentical(fused, separate, name);
  }
}

// Llama's blocks: the norms and their backward leave amaxes, SwiGLU leaves none (its products
// measure their operands), and the final norm's backward leaves the top block's.
TEST(Fp8TrainingTest, ProducersAmaxChangesNoBitOfLlama) {
  ModelConfig config = TinyConfig(true);
  config.arch = ModelArch::kLlama;
  config.heads = 4;
  config.kv_heads = 2;  // qkv rows of (4 + 2·2)·4 = 32
  config.ffn_hidden = 48;
  config.rope_theta = 100.0;
  config.matmul_dtype = MatmulDtype::kFp8;
  ASSERT_EQ(setenv("FSDPD_FP8_AMAX", "separate", 1), 0);
  const Trained separate = Train(config, ActivationRecompute::kNone);
  ASSERT_EQ(unsetenv("FSDPD_FP8_AMAX"), 0);
  const Trained fused = Train(config, ActivationRecompute::kNone);
  ASSERT_EQ(separate.losses.size(), static_cast<size_t>(kSteps));
  EXPECT_LT(separate.losses.back(), separate.losses.front());
  ExpectBitIdentical(fused, separate, "llama");
}

// An unknown FSDPD_FP8_AMAX fails the model, with FP8 products or without, rather than running
// the default silently.
TEST(Fp8TrainingTest, AnUnknownAmaxModeFailsTheModel) {
  for (const MatmulDtype dtype : {MatmulDtype::kFp8, MatmulDtype::kBackend}) {
    ModelConfig config = TinyFp8Config(false);
    config.matmul_dtype = dtype;
    ASSERT_EQ(setenv("FSDPD_FP8_AMAX", "delayed", 1), 0);
    CpuBackend backend;
    const auto model = MiniLLM::Create(config, kBatch, kSeq, &backend);
    ASSERT_EQ(unsetenv("FSDPD_FP8_AMAX"), 0);
    ASSERT_FALSE(model.ok());
    EXPECT_NE(model.status().message().find("FSDPD_FP8_AMAX must be fused or separate, got "
                                            "\"delayed\""),
              std::string::npos)
        << model.status();
  }
  ModelConfig config = TinyFp8Config(false);
  ASSERT_EQ(setenv("FSDPD_FP8_AMAX", "separate", 1), 0);
  CpuBackend backend;
  const auto model = MiniLLM::Create(config, kBatch, kSeq, &backend);
  ASSERT_EQ(unsetenv("FSDPD_FP8_AMAX"), 0);
  EXPECT_TRUE(model.ok()) << model.status();  // a known value is fine on bf16 products too
}

INSTANTIATE_TEST_SUITE_P(SeedAndCausalFinalNorm, Fp8TrainingTest, ::testing::Bool());

TEST(Fp8TrainingTest, ParsesTheSpecNames) {
  EXPECT_EQ(*ParseMatmulDtype(""), MatmulDtype::kBackend);
  EXPECT_EQ(*ParseMatmulDtype("bf16"), MatmulDtype::kBackend);
  EXPECT_EQ(*ParseMatmulDtype("fp8"), MatmulDtype::kFp8);
  auto bad = ParseMatmulDtype("fp4");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("parallel.matmul_dtype"), std::string::npos);
}

TEST(Fp8TrainingTest, ShapesOffSixteenFailWithTheRule) {
  ModelConfig config = TinyConfig(false);  // ffn_hidden 40
  config.matmul_dtype = MatmulDtype::kFp8;
  CpuBackend backend;
  auto model = MiniLLM::Create(config, kBatch, kSeq, &backend);
  ASSERT_TRUE(model.ok()) << model.status();
  std::vector<float> params((*model)->units()[0].numel, 0.01f);
  std::vector<int32_t> tokens(kBatch * kSeq, 1), targets(kBatch * kSeq, 2);
  std::vector<float> root((*model)->units().back().numel, 0.01f);
  ASSERT_TRUE((*model)->BeginStep(tokens.data(), targets.data()).ok());
  ASSERT_TRUE(
      (*model)
          ->EmbedForward(Tensor{root.data(), DType::kF32, {static_cast<int64_t>(root.size())}})
          .ok());
  const absl::Status status = (*model)->BlockForward(
      0, Tensor{params.data(), DType::kF32, {static_cast<int64_t>(params.size())}});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("multiples of 16"), std::string::npos) << status;
}

TEST(ActivationRecomputeTest, ParsesTheSpecNames) {
  EXPECT_EQ(*ParseActivationRecompute(""), ActivationRecompute::kNone);
  EXPECT_EQ(*ParseActivationRecompute("none"), ActivationRecompute::kNone);
  EXPECT_EQ(*ParseActivationRecompute("ffn"), ActivationRecompute::kFfn);
  EXPECT_EQ(*ParseActivationRecompute("block"), ActivationRecompute::kBlock);
  auto bad = ParseActivationRecompute("selective");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("parallel.activation_recompute"), std::string::npos);
  EXPECT_NE(bad.status().message().find("selective"), std::string::npos);
}

}  // namespace
}  // namespace fsdpd
