// MiniLLM on the CPU backend: parameter layout, initialisation, the whole model's gradients
// against finite differences, and that it trains.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/spec/job_spec.h"
#include "worker/backend/cpu_backend.h"
#include "worker/model/minillm.h"

namespace fsdpd {
namespace {

using ::testing::HasSubstr;

ModelConfig TinyConfig() {
  ModelConfig config;
  config.vocab = 11;
  config.dim = 8;
  config.layers = 2;
  config.heads = 2;
  config.ffn_hidden = 16;
  return config;
}

// A model with each unit's parameters and gradients in host vectors (on CPU the "device" is
// the host), driven through a full step as the FSDP runner does.
class Harness {
 public:
  Harness(const ModelConfig& config, int64_t batch, int64_t seq, uint64_t seed = 0)
      : batch_(batch), seq_(seq) {
    auto created = MiniLLM::Create(config, batch, seq, &backend_);
    EXPECT_TRUE(created.ok()) << created.status();
    model_ = std::move(*created);
    for (size_t u = 0; u < model_->units().size(); ++u) {
      const UnitLayout& unit = model_->units()[u];
      params_.emplace_back(static_cast<size_t>(unit.numel));
      grads_.emplace_back(static_cast<size_t>(unit.numel), 0.0f);
      InitializeUnit(config, unit, static_cast<int>(u), seed, params_.back().data());
    }
    std::mt19937 random(1234);
    tokens_.resize(static_cast<size_t>(batch * seq));
    targets_.resize(tokens_.size());
    for (auto& token : tokens_) token = static_cast<int32_t>(random() % config.vocab);
    for (auto& target : targets_) target = static_cast<int32_t>(random() % config.vocab);
  }

  static Tensor View(std::vector<float>& values) {
    return Tensor{values.data(), DType::kF32, {static_cast<int64_t>(values.size())}};
  }
  Tensor Params(int unit) { return View(params_[static_cast<size_t>(unit)]); }
  Tensor Grads(int unit) { return View(grads_[static_cast<size_t>(unit)]); }

  // One forward and backward; gradients are zeroed first. Returns the loss.
  float Step(double loss_scale = 1.0) {
    for (auto& grad : grads_) std::fill(grad.begin(), grad.end(), 0.0f);
    const int root = model_->root_unit();
    const int layers = static_cast<int>(model_->config().layers);
    EXPECT_TRUE(model_->BeginStep(tokens_.data(), targets_.data()).ok());
    EXPECT_TRUE(model_->EmbedForward(Params(root)).ok());
    for (int layer = 0; layer < layers; ++layer) {
      EXPECT_TRUE(model_->BlockForward(layer, Params(layer)).ok());
    }
    EXPECT_TRUE(model_->HeadForwardBackward(Params(root), Grads(root), loss_scale).ok());
    for (int layer = layers - 1; layer >= 0; --layer) {
      EXPECT_TRUE(model_->BlockBackward(layer, Params(layer), Grads(layer)).ok());
    }
    EXPECT_TRUE(model_->EmbedBackward(Grads(root)).ok());
    absl::StatusOr<float> loss = model_->Loss();
    EXPECT_TRUE(loss.ok()) << loss.status();
    return loss.ok() ? *loss : NAN;
  }

  CpuBackend backend_;
  std::unique_ptr<MiniLLM> model_;
  int64_t batch_, seq_;
  std::vector<std::vector<float>> params_, grads_;
  std::vector<int32_t> tokens_, targets_;
};

TEST(ModelLayoutTest, BlocksThenRootInStateDictOrder) {
  ModelConfig config = TinyConfig();
  const std::vector<UnitLayout> units = BuildUnitLayouts(config);
  ASSERT_EQ(units.size(), 3u);
  EXPECT_EQ(units[1].name, "layers.1");
  std::vector<std::string> names;
  for (const ParameterInfo& info : units[1].parameters) names.push_back(info.name);
  EXPECT_EQ(names,
            (std::vector<std::string>{"layers.1.norm1.weight", "layers.1.attn.in_proj_weight",
                                      "layers.1.attn.in_proj_bias", "layers.1.attn.out_proj.weight",
                                      "layers.1.attn.out_proj.bias", "layers.1.norm2.weight",
                                      "layers.1.ffn.0.weight", "layers.1.ffn.2.weight"}));
  EXPECT_EQ(units[1].Find("layers.1.attn.in_proj_weight").shape, (std::vector<int64_t>{24, 8}));
  EXPECT_EQ(units[1].Find("layers.1.ffn.2.weight").shape, (std::vector<int64_t>{8, 16}));
  // Parameters tile the unit with no gaps.
  for (const UnitLayout& unit : units) {
    int64_t offset = 0;
    for (const ParameterInfo& info : unit.parameters) {
      EXPECT_EQ(info.offset, offset) << info.name;
      offset += info.numel;
    }
    EXPECT_EQ(unit.numel, offset);
  }
  EXPECT_EQ(units.back().name, "root");
  EXPECT_EQ(units.back().parameters.size(), 2u);
  EXPECT_EQ(units.back().parameters[0].name, "embed.weight");
  EXPECT_EQ(units.back().parameters[1].name, "head.weight");
  config.final_norm = true;
  EXPECT_EQ(BuildUnitLayouts(config).back().Find("norm.weight").shape, (std::vector<int64_t>{8}));
}

TEST(ModelLayoutTest, SeedModelHasTheSeedsParameterCount) {
  const ModelConfig config;  // the seed's defaults
  int64_t total = 0;
  for (const UnitLayout& unit : BuildUnitLayouts(config)) total += unit.numel;
  EXPECT_EQ(total, 735199232);  // sum(p.numel() for p in MiniLLM().parameters())
  EXPECT_EQ(total, ParameterCount(DefaultJobSpec().model()));
}

TEST(ModelConfigTest, FromSpec) {
  v1::ModelSpec spec;
  spec.set_vocab(100);
  spec.set_dim(12);
  spec.set_layers(3);
  spec.set_heads(4);
  spec.set_ffn_mult(4);
  // The spec was validated where it entered (SpecValidate.ModelRulesNameTheirField covers the
  // model's rules); this is a plain conversion.
  const ModelConfig config = ModelConfigFromSpec(spec);
  EXPECT_EQ(config.vocab, 100);
  EXPECT_EQ(config.dim, 12);
  EXPECT_EQ(config.layers, 3);
  EXPECT_EQ(config.heads, 4);
  EXPECT_EQ(config.ffn_hidden, 48);
  EXPECT_EQ(config.norm_eps, 1.1920928955078125e-07);  // 0 in the spec: fp32 epsilon
  EXPECT_FALSE(config.causal);
  EXPECT_FALSE(config.final_norm);
  spec.set_norm_eps(1e-5);
  spec.set_causal(true);
  spec.set_final_norm(true);
  EXPECT_EQ(ModelConfigFromSpec(spec).norm_eps, 1e-5);
  EXPECT_TRUE(ModelConfigFromSpec(spec).causal);
  EXPECT_TRUE(ModelConfigFromSpec(spec).final_norm);
}

TEST(ModelInitTest, PyTorchDefaultsDeterministicPerUnit) {
  ModelConfig config = TinyConfig();
  config.dim = 64;
  config.vocab = 500;
  config.ffn_hidden = 256;
  const std::vector<UnitLayout> units = BuildUnitLayouts(config);
  const UnitLayout& block = units[0];
  std::vector<float> a(block.numel), b(block.numel), other_unit(block.numel),
      other_seed(block.numel);
  InitializeUnit(config, block, 0, 7, a.data());
  InitializeUnit(config, block, 0, 7, b.data());
  InitializeUnit(config, units[1], 1, 7, other_unit.data());
  InitializeUnit(config, block, 0, 8, other_seed.data());
  EXPECT_EQ(a, b);
  EXPECT_NE(a, other_unit);
  EXPECT_NE(a, other_seed);

  auto values = [&](const std::vector<float>& flat, const UnitLayout& unit,
                    const std::string& name) {
    const ParameterInfo& info = unit.Find(name);
    return std::vector<float>(flat.begin() + info.offset, flat.begin() + info.offset + info.numel);
  };
  auto expect_uniform = [](const std::vector<float>& v, double bound, const std::string& name) {
    double sum = 0, sum_sq = 0, largest = 0;
    for (float x : v) {
      sum += x;
      sum_sq += x * x;
      largest = std::max(largest, std::fabs(static_cast<double>(x)));
    }
    const double n = static_cast<double>(v.size());
    EXPECT_LE(largest, bound) << name;
    EXPECT_GT(largest, 0.95 * bound) << name;  // fills the range
    // U(−a, a) has variance a²/3; with thousands of samples 10% is many standard errors.
    EXPECT_NEAR(sum_sq / n, bound * bound / 3, 0.1 * bound * bound / 3) << name;
    EXPECT_NEAR(sum / n, 0.0, 0.05 * bound) << name;
  };
  expect_uniform(values(a, block, "layers.0.attn.in_proj_weight"), std::sqrt(6.0 / (64 + 192)),
                 "in_proj_weight");
  expect_uniform(values(a, block, "layers.0.attn.out_proj.weight"), 1.0 / 8, "out_proj.weight");
  expect_uniform(values(a, block, "layers.0.ffn.0.weight"), 1.0 / 8, "ffn.0.weight");
  expect_uniform(values(a, block, "layers.0.ffn.2.weight"), 1.0 / 16, "ffn.2.weight");
  for (float x : values(a, block, "layers.0.attn.in_proj_bias")) EXPECT_EQ(x, 0.0f);
  for (float x : values(a, block, "layers.0.attn.out_proj.bias")) EXPECT_EQ(x, 0.0f);
  for (float x : values(a, block, "layers.0.norm1.weight")) EXPECT_EQ(x, 1.0f);
  for (float x : values(a, block, "layers.0.norm2.weight")) EXPECT_EQ(x, 1.0f);

  const UnitLayout& root = units.back();
  std::vector<float> root_values(root.numel);
  InitializeUnit(config, root, static_cast<int>(units.size()) - 1, 7, root_values.data());
  const std::vector<float> embed = values(root_values, root, "embed.weight");
  double sum = 0, sum_sq = 0;
  for (float x : embed) {
    sum += x;
    sum_sq += x * x;
  }
  EXPECT_NEAR(sum / embed.size(), 0.0, 0.02);  // N(0, 1): 32000 samples
  EXPECT_NEAR(sum_sq / embed.size(), 1.0, 0.03);
  expect_uniform(values(root_values, root, "head.weight"), 1.0 / 8, "head.weight");
}

// Every tensor's gradient against central differences of the loss, for a few random elements
// of each. The loss is a mean over 10 tokens of ~log(11) ≈ 2.4 in fp32, so rounding adds
// about 2.4·6e-8/h ≈ 1.4e-5 to a numeric gradient at h = 1e-2 and truncation O(h²) adds
// ~1e-4 relative; |numeric − analytic| ≤ 3e-4 + 2e-2·|analytic| covers both, while any wrong
// term in a backward is far larger.
class ModelGradientTest : public ::testing::TestWithParam<std::pair<bool, bool>> {};

TEST_P(ModelGradientTest, MatchesFiniteDifferences) {
  ModelConfig config = TinyConfig();
  config.causal = GetParam().first;
  config.final_norm = GetParam().second;
  Harness harness(config, 2, 5, 3);
  harness.Step();
  const std::vector<std::vector<float>> analytic = harness.grads_;
  std::mt19937 random(99);
  const float step = 1e-2f;
  int checked = 0, failures = 0;
  double largest_gradient = 0.0;
  for (size_t u = 0; u < harness.model_->units().size(); ++u) {
    for (const ParameterInfo& info : harness.model_->units()[u].parameters) {
      for (int sample = 0; sample < 4; ++sample) {
        int64_t index = info.offset + static_cast<int64_t>(random() % info.numel);
        if (info.name == "embed.weight") {
          // Pick a row that a token uses, or the gradient is trivially zero.
          index = info.offset + harness.tokens_[random() % harness.tokens_.size()] * config.dim +
                  static_cast<int64_t>(random() % config.dim);
        }
        float& value = harness.params_[u][static_cast<size_t>(index)];
        const float original = value;
        value = original + step;
        const double plus = harness.Step();
        value = original - step;
        const double minus = harness.Step();
        value = original;
        const double numeric = (plus - minus) / (2.0 * step);
        const double expected = analytic[u][static_cast<size_t>(index)];
        largest_gradient = std::max(largest_gradient, std::fabs(expected));
        ++checked;
        if (std::fabs(numeric - expected) > 3e-4 + 2e-2 * std::fabs(expected)) {
          ++failures;
          ADD_FAILURE() << info.name << " element " << index - info.offset << ": analytic "
                        << expected << ", numeric " << numeric;
        }
      }
    }
  }
  EXPECT_EQ(failures, 0) << "of " << checked;
  EXPECT_GT(largest_gradient, 1e-2);  // the check is not vacuous
}

INSTANTIATE_TEST_SUITE_P(Variants, ModelGradientTest,
                         ::testing::Values(std::make_pair(false, false),
                                           std::make_pair(true, false), std::make_pair(false, true),
                                           std::make_pair(true, true)),
                         [](const ::testing::TestParamInfo<std::pair<bool, bool>>& info) {
                           return std::string(info.param.first ? "Causal" : "NoMask") +
                                  (info.param.second ? "FinalNorm" : "NoFinalNorm");
                         });

TEST(ModelMiniLLMTest, LossScaleScalesGradientsNotLoss) {
  Harness harness(TinyConfig(), 2, 3);
  const float loss = harness.Step(1.0);
  const std::vector<std::vector<float>> full = harness.grads_;
  EXPECT_FLOAT_EQ(harness.Step(0.25), loss);
  for (size_t u = 0; u < full.size(); ++u) {
    for (size_t i = 0; i < full[u].size(); ++i) {
      ASSERT_NEAR(harness.grads_[u][i], 0.25f * full[u][i], 1e-6f + 1e-5f * std::fabs(full[u][i]));
    }
  }
}

TEST(ModelMiniLLMTest, LogitsAgreeWithLoss) {
  ModelConfig config = TinyConfig();
  config.final_norm = true;
  Harness harness(config, 3, 4);
  const float loss = harness.Step();
  std::vector<Tensor> params;
  for (size_t u = 0; u < harness.params_.size(); ++u) {
    params.push_back(harness.Params(static_cast<int>(u)));
  }
  std::vector<float> logits;
  ASSERT_TRUE(harness.model_->Logits(params, &logits).ok());
  ASSERT_EQ(logits.size(), harness.tokens_.size() * config.vocab);
  double total = 0.0;
  for (size_t t = 0; t < harness.targets_.size(); ++t) {
    const float* row = logits.data() + t * config.vocab;
    double maximum = *std::max_element(row, row + config.vocab), sum = 0.0;
    for (int64_t v = 0; v < config.vocab; ++v) sum += std::exp(row[v] - maximum);
    total += maximum + std::log(sum) - row[harness.targets_[t]];
  }
  EXPECT_NEAR(total / harness.targets_.size(), loss, 1e-5);
}

// With the causal mask a position's logits depend only on tokens at or before it; without it,
// changing the last token changes every position's logits.
TEST(ModelMiniLLMTest, CausalMaskHidesLaterTokens) {
  for (const bool causal : {true, false}) {
    ModelConfig config = TinyConfig();
    config.causal = causal;
    Harness harness(config, 1, 6);
    std::vector<Tensor> params;
    for (size_t u = 0; u < harness.params_.size(); ++u) {
      params.push_back(harness.Params(static_cast<int>(u)));
    }
    std::vector<float> before, after;
    ASSERT_TRUE(harness.model_->BeginStep(harness.tokens_.data(), harness.targets_.data()).ok());
    ASSERT_TRUE(harness.model_->Logits(params, &before).ok());
    harness.tokens_.back() = (harness.tokens_.back() + 1) % static_cast<int32_t>(config.vocab);
    ASSERT_TRUE(harness.model_->BeginStep(harness.tokens_.data(), harness.targets_.data()).ok());
    ASSERT_TRUE(harness.model_->Logits(params, &after).ok());
    const size_t earlier = 5 * static_cast<size_t>(config.vocab);  // positions 0..4
    double change = 0.0;
    for (size_t i = 0; i < earlier; ++i) change += std::fabs(after[i] - before[i]);
    if (causal) {
      EXPECT_EQ(change, 0.0);
    } else {
      EXPECT_GT(change, 1e-3);
    }
  }
}

TEST(ModelMiniLLMTest, TrainsOnAFixedBatch) {
  ModelConfig config = TinyConfig();
  config.vocab = 32;
  config.dim = 32;
  config.heads = 4;
  config.ffn_hidden = 128;
  Harness harness(config, 4, 16);
  CpuBackend& backend = harness.backend_;
  std::vector<std::vector<float>> exp_avg, exp_avg_sq;
  for (const auto& param : harness.params_) {
    exp_avg.emplace_back(param.size(), 0.0f);
    exp_avg_sq.emplace_back(param.size(), 0.0f);
  }
  AdamWParams adamw;
  adamw.lr = 1e-2;
  float first = 0.0f, last = 0.0f;
  for (int step = 1; step <= 40; ++step) {
    last = harness.Step();
    if (step == 1) first = last;
    adamw.step = step;
    for (size_t u = 0; u < harness.params_.size(); ++u) {
      ASSERT_TRUE(backend.ops()
                      .AdamW(Harness::View(harness.params_[u]), Harness::View(harness.grads_[u]),
                             Harness::View(exp_avg[u]), Harness::View(exp_avg_sq[u]), adamw,
                             backend.compute_stream())
                      .ok());
    }
  }
  // Memorising 64 random targets: from about log(32) ≈ 3.5 to well under half of it.
  EXPECT_NEAR(first, std::log(32.0f), 1.5f);
  EXPECT_LT(last, 0.5f * first);
}

TEST(ModelMiniLLMTest, CallsOutOfOrderAreRefused) {
  Harness harness(TinyConfig(), 1, 4);
  const int root = harness.model_->root_unit();
  EXPECT_EQ(harness.model_->EmbedForward(harness.Params(root)).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(harness.model_->BeginStep(harness.tokens_.data(), harness.targets_.data()).ok());
  ASSERT_TRUE(harness.model_->EmbedForward(harness.Params(root)).ok());
  const absl::Status skipped = harness.model_->BlockForward(1, harness.Params(1));
  EXPECT_EQ(skipped.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(skipped.message()), HasSubstr("expected layer 0"));
  EXPECT_EQ(
      harness.model_->HeadForwardBackward(harness.Params(root), harness.Grads(root), 1.0).code(),
      absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(harness.model_->Loss().status().code(), absl::StatusCode::kFailedPrecondition)
      << "no loss was queued in this step";
  EXPECT_EQ(harness.model_->EmbedBackward(harness.Grads(root)).code(),
            absl::StatusCode::kFailedPrecondition);
  std::vector<float> logits;
  EXPECT_EQ(harness.model_->Logits({harness.Params(0)}, &logits).code(),
            absl::StatusCode::kInvalidArgument);
  // A unit buffer too small for its layout.
  std::vector<float> small(10);
  EXPECT_THAT(std::string(harness.model_->BlockForward(0, Harness::View(small)).message()),
              HasSubstr("layers.0"));
}

TEST(ModelMiniLLMTest, BadTokensAndConfigsAreErrors) {
  Harness harness(TinyConfig(), 1, 4);
  std::vector<int32_t> tokens = {0, 1, 11, 2};
  const absl::Status status = harness.model_->BeginStep(tokens.data(), harness.targets_.data());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("token 11 at position 2"));

  CpuBackend backend;
  ModelConfig config = TinyConfig();
  config.heads = 3;
  EXPECT_EQ(MiniLLM::Create(config, 1, 4, &backend).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MiniLLM::Create(TinyConfig(), 0, 4, &backend).status().code(),
            absl::StatusCode::kInvalidArgument);
  CpuBackend small_backend(CpuBackendConfig{4096});
  const absl::Status no_memory = MiniLLM::Create(TinyConfig(), 8, 64, &small_backend).status();
  EXPECT_EQ(no_memory.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(no_memory.message()), HasSubstr("MiniLLM activations"));
}

}  // namespace
}  // namespace fsdpd
