// The Llama model on the CPU backend against transformers' LlamaForCausalLM
// (tests/golden/make_llama_fixtures.py): forward logits and loss, every gradient, three AdamW
// steps, and a 20-step loss trajectory, all from the same initial weights, for an untied head
// (llama_tiny) and a head tied to the embedding with a non-default rope_theta
// (llama_tiny_tied). The bounds are MiniLLM's (tests/unit/model_golden_test.cc says why each
// holds for fp32 on both sides with different summation orders); the model adds rotary
// positions, grouped-query attention and SwiGLU, none of which loosens them.
#include <cmath>
#include <cstdint>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "formats/safetensors.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "worker/backend/cpu_backend.h"
#include "worker/model/minillm.h"

namespace fsdpd {
namespace {

const std::string kGolden = FSDPD_GOLDEN_ROOT;

std::map<std::string, NamedTensor> ReadAll(const std::string& path) {
  absl::StatusOr<std::vector<NamedTensor>> tensors = ReadSafetensors(path);
  EXPECT_TRUE(tensors.ok()) << path << ": " << tensors.status();
  std::map<std::string, NamedTensor> by_name;
  if (tensors.ok()) {
    for (NamedTensor& tensor : *tensors) by_name[tensor.name] = std::move(tensor);
  }
  return by_name;
}

// Fails with the worst element where |actual − expected| > atol + rtol·|expected|.
void ExpectClose(const std::string& what, const float* actual, const std::vector<float>& expected,
                 double atol, double rtol) {
  double worst_excess = -1.0, largest_error = 0.0;
  size_t worst = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    const double error = std::fabs(static_cast<double>(actual[i]) - expected[i]);
    largest_error = std::max(largest_error, error);
    const double excess = error - (atol + rtol * std::fabs(expected[i]));
    if (excess > worst_excess) {
      worst_excess = excess;
      worst = i;
    }
  }
  EXPECT_LE(worst_excess, 0.0) << what << "[" << worst << "]: got " << actual[worst]
                               << ", transformers " << expected[worst] << " (largest error "
                               << largest_error << ")";
}

class ModelLlamaGoldenTest : public ::testing::TestWithParam<std::string> {
 protected:
  std::string Fixture(const std::string& file) const {
    return kGolden + "/" + GetParam() + "/" + file;
  }

  void SetUp() override {
    std::ifstream file(Fixture("config.json"));
    ASSERT_TRUE(file) << "missing " << Fixture("config.json");
    const nlohmann::json json = nlohmann::json::parse(file);
    ASSERT_EQ(json.at("arch"), "llama");
    config_.arch = ModelArch::kLlama;
    config_.vocab = json.at("vocab");
    config_.dim = json.at("dim");
    config_.layers = json.at("layers");
    config_.heads = json.at("heads");
    config_.kv_heads = json.at("kv_heads");
    config_.ffn_hidden = json.at("ffn_dim");
    config_.rope_theta = json.at("rope_theta");
    config_.norm_eps = json.at("norm_eps");
    config_.tie_embeddings = json.at("tie_embeddings");
    config_.causal = true;
    config_.final_norm = true;
    ASSERT_LT(config_.kv_heads, config_.heads) << "the fixture should exercise grouped queries";
    batch_ = json.at("batch");
    seq_ = json.at("seq");
    adamw_.lr = json.at("lr");
    adamw_.weight_decay = json.at("weight_decay");
    adamw_.beta1 = json.at("beta1");
    adamw_.beta2 = json.at("beta2");
    adamw_.eps = json.at("eps");
    trajectory_lr_ = json.at("trajectory_lr");
    trajectory_steps_ = json.at("trajectory_steps");

    absl::StatusOr<std::unique_ptr<MiniLLM>> model =
        MiniLLM::Create(config_, batch_, seq_, &backend_);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(*model);
    LoadParameters(ReadAll(Fixture("init.safetensors")));

    std::map<std::string, NamedTensor> batch = ReadAll(Fixture("batch.safetensors"));
    for (const float id : batch["inputs"].values) inputs_.push_back(static_cast<int32_t>(id));
    for (const float id : batch["targets"].values) targets_.push_back(static_cast<int32_t>(id));
    ASSERT_EQ(static_cast<int64_t>(inputs_.size()), batch_ * seq_);
  }

  // Every parameter of the layout must be in the file with its shape, and nothing else: the
  // units hold exactly LlamaForCausalLM's parameters (no lm_head when tied).
  void LoadParameters(const std::map<std::string, NamedTensor>& tensors) {
    std::set<std::string> used;
    for (const UnitLayout& unit : model_->units()) {
      params_.emplace_back(static_cast<size_t>(unit.numel));
      grads_.emplace_back(static_cast<size_t>(unit.numel), 0.0f);
      exp_avg_.emplace_back(static_cast<size_t>(unit.numel), 0.0f);
      exp_avg_sq_.emplace_back(static_cast<size_t>(unit.numel), 0.0f);
      for (const ParameterInfo& info : unit.parameters) {
        auto found = tensors.find(info.name);
        ASSERT_NE(found, tensors.end()) << info.name << " is not in the fixture";
        ASSERT_EQ(found->second.shape, info.shape) << info.name;
        std::copy(found->second.values.begin(), found->second.values.end(),
                  params_.back().begin() + info.offset);
        used.insert(info.name);
      }
    }
    EXPECT_EQ(used.size(), tensors.size()) << "the fixture has parameters the model lacks";
  }

  static Tensor View(std::vector<float>& values) {
    return Tensor{values.data(), DType::kF32, {static_cast<int64_t>(values.size())}};
  }

  float ForwardBackward(const std::vector<int32_t>& inputs, const std::vector<int32_t>& targets) {
    for (auto& grad : grads_) std::fill(grad.begin(), grad.end(), 0.0f);
    const int root = model_->root_unit();
    EXPECT_TRUE(model_->BeginStep(inputs.data(), targets.data()).ok());
    EXPECT_TRUE(model_->EmbedForward(View(params_[root])).ok());
    for (int layer = 0; layer < config_.layers; ++layer) {
      const absl::Status status = model_->BlockForward(layer, View(params_[layer]));
      EXPECT_TRUE(status.ok()) << status;
    }
    EXPECT_TRUE(model_->HeadForwardBackward(View(params_[root]), View(grads_[root]), 1.0).ok());
    for (int layer = static_cast<int>(config_.layers) - 1; layer >= 0; --layer) {
      const absl::Status status =
          model_->BlockBackward(layer, View(params_[layer]), View(grads_[layer]));
      EXPECT_TRUE(status.ok()) << status;
    }
    EXPECT_TRUE(model_->EmbedBackward(View(grads_[root])).ok());
    absl::StatusOr<float> loss = model_->Loss();
    EXPECT_TRUE(loss.ok()) << loss.status();
    return loss.value_or(NAN);
  }

  void OptimizerStep(AdamWParams adamw, int64_t step) {
    adamw.step = step;
    for (size_t u = 0; u < params_.size(); ++u) {
      ASSERT_TRUE(backend_.ops()
                      .AdamW(View(params_[u]), View(grads_[u]), View(exp_avg_[u]),
                             View(exp_avg_sq_[u]), adamw, backend_.compute_stream())
                      .ok());
    }
  }

  void ExpectMatchesFixture(const std::string& what, std::vector<std::vector<float>>& flat,
                            const std::map<std::string, NamedTensor>& expected, double atol,
                            double rtol) {
    for (size_t u = 0; u < model_->units().size(); ++u) {
      for (const ParameterInfo& info : model_->units()[u].parameters) {
        auto found = expected.find(info.name);
        ASSERT_NE(found, expected.end()) << what << ": " << info.name << " missing";
        ASSERT_EQ(found->second.values.size(), static_cast<size_t>(info.numel));
        ExpectClose(what + " " + info.name, flat[u].data() + info.offset, found->second.values,
                    atol, rtol);
      }
    }
  }

  ModelConfig config_;
  int64_t batch_ = 0, seq_ = 0;
  AdamWParams adamw_;
  double trajectory_lr_ = 0;
  int trajectory_steps_ = 0;
  CpuBackend backend_;
  std::unique_ptr<MiniLLM> model_;
  std::vector<std::vector<float>> params_, grads_, exp_avg_, exp_avg_sq_;
  std::vector<int32_t> inputs_, targets_;
};

TEST_P(ModelLlamaGoldenTest, LogitsAndLoss) {
  std::map<std::string, NamedTensor> forward = ReadAll(Fixture("forward.safetensors"));
  std::vector<Tensor> params;
  for (auto& unit : params_) params.push_back(View(unit));
  ASSERT_TRUE(model_->BeginStep(inputs_.data(), targets_.data()).ok());
  std::vector<float> logits;
  ASSERT_TRUE(model_->Logits(params, &logits).ok());
  ASSERT_EQ(logits.size(), forward["logits"].values.size());
  ExpectClose("logits", logits.data(), forward["logits"].values, 1e-5, 1e-4);
  const float loss = ForwardBackward(inputs_, targets_);
  ExpectClose("loss", &loss, forward["loss"].values, 1e-5, 1e-5);
}

TEST_P(ModelLlamaGoldenTest, Gradients) {
  ForwardBackward(inputs_, targets_);
  ExpectMatchesFixture("gradient", grads_, ReadAll(Fixture("grads.safetensors")), 1e-6, 1e-3);
}

TEST_P(ModelLlamaGoldenTest, ThreeAdamWSteps) {
  std::vector<float> losses;
  for (int64_t step = 1; step <= 3; ++step) {
    losses.push_back(ForwardBackward(inputs_, targets_));
    OptimizerStep(adamw_, step);
  }
  std::map<std::string, NamedTensor> recorded = ReadAll(Fixture("losses.safetensors"));
  ASSERT_EQ(recorded.count("adamw_losses"), 1u);
  ASSERT_EQ(recorded["adamw_losses"].values.size(), losses.size());
  ExpectClose("loss per AdamW step", losses.data(), recorded["adamw_losses"].values, 1e-5, 1e-5);
  // Llama has no bias, so no element whose exact gradient is zero (MiniLLM's key bias): every
  // element must agree to fp32 rounding carried through 3 updates.
  ExpectMatchesFixture("after 3 steps", params_, ReadAll(Fixture("after_3_steps.safetensors")),
                       1e-6, 1e-4);
}

TEST_P(ModelLlamaGoldenTest, LossTrajectory) {
  std::ifstream file(Fixture("tokens.bin"), std::ios::binary);
  ASSERT_TRUE(file);
  const std::vector<unsigned char> bytes((std::istreambuf_iterator<char>(file)), {});
  std::vector<int32_t> tokens;
  for (size_t i = 0; i + 1 < bytes.size(); i += 2) tokens.push_back(bytes[i] | (bytes[i + 1] << 8));
  std::map<std::string, NamedTensor> recorded = ReadAll(Fixture("losses.safetensors"));
  ASSERT_EQ(recorded.count("trajectory_losses"), 1u);
  const std::vector<float> expected = recorded["trajectory_losses"].values;
  ASSERT_EQ(expected.size(), static_cast<size_t>(trajectory_steps_));
  const int64_t windows = (static_cast<int64_t>(tokens.size()) - 1) / seq_;
  AdamWParams adamw = adamw_;
  adamw.lr = trajectory_lr_;
  std::vector<float> losses;
  for (int step = 0; step < trajectory_steps_; ++step) {
    std::vector<int32_t> inputs, targets;
    for (int64_t i = 0; i < batch_; ++i) {
      const int64_t window = (step * batch_ + i) % windows;
      inputs.insert(inputs.end(), tokens.begin() + window * seq_,
                    tokens.begin() + window * seq_ + seq_);
      targets.insert(targets.end(), tokens.begin() + window * seq_ + 1,
                     tokens.begin() + window * seq_ + seq_ + 1);
    }
    losses.push_back(ForwardBackward(inputs, targets));
    OptimizerStep(adamw, step + 1);
  }
  ExpectClose("trajectory loss", losses.data(), expected, 1e-5, 0.0);
  EXPECT_LT(losses.back(), losses.front());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ModelLlamaGoldenTest,
                         ::testing::Values("llama_tiny", "llama_tiny_tied"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param == "llama_tiny" ? std::string("Untied")
                                                             : std::string("TiedHead");
                         });

}  // namespace
}  // namespace fsdpd
