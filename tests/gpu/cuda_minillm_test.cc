// One training step of a small MiniLLM on the CUDA backend (bf16 parameters and activations,
// fp32 gradients) against the same step on the CPU backend (fp32) from the same bf16-rounded
// parameters and the same batch: the loss and every unit's gradient must agree to within what
// bf16 activations allow. This checks that the CUDA ops fit the model's calls (dtypes, aliasing,
// optional outputs), not only each op alone. With matmul_dtype fp8 both sides run the blocks'
// linear layers in FP8 (the CPU's emulation, kernels/cpu/fp8.h, against cuBLASLt's FP8
// products), with bounds widened for it below.
#include <cmath>
#include <string>

#include "tests/gpu/cuda_test_support.h"
#include "worker/model/minillm.h"

namespace fsdpd::testing {
namespace {

struct MiniLLMCase {
  bool causal;
  bool fp8;
};

class CudaMiniLLMTest : public CudaTest, public ::testing::WithParamInterface<MiniLLMCase> {};

TEST_P(CudaMiniLLMTest, OneStepMatchesTheCpu) {
  ModelConfig config;
  config.vocab = 512;
  config.dim = 256;
  config.layers = 2;
  config.heads = 2;  // head_dim 128, the seed's: the tensor-core attention
  config.ffn_hidden = 1024;
  config.causal = GetParam().causal;
  const bool fp8 = GetParam().fp8;
  if (fp8) {
    config.matmul_dtype = MatmulDtype::kFp8;
    if (const std::string reason = WithoutFp8TensorCores(); !reason.empty()) GTEST_SKIP() << reason;
  }
  const int64_t batch = 2, seq = 64, tokens = batch * seq;

  absl::StatusOr<std::unique_ptr<MiniLLM>> gpu_model =
      MiniLLM::Create(config, batch, seq, cuda_.get());
  ASSERT_TRUE(gpu_model.ok()) << gpu_model.status();
  absl::StatusOr<std::unique_ptr<MiniLLM>> cpu_model = MiniLLM::Create(config, batch, seq, &cpu_);
  ASSERT_TRUE(cpu_model.ok()) << cpu_model.status();
  const std::vector<UnitLayout>& units = (*gpu_model)->units();

  std::vector<std::vector<float>> host_params(units.size()), host_grads(units.size());
  std::vector<Tensor> gpu_params, gpu_grads, cpu_params, cpu_grads;
  for (size_t u = 0; u < units.size(); ++u) {
    std::vector<float>& values = host_params[u];
    values.assign(static_cast<size_t>(units[u].numel), 0.0f);
    for (const ParameterInfo& parameter : units[u].parameters) {
      const bool vector = parameter.shape.size() == 1;
      const bool norm = parameter.name.find("norm") != std::string::npos;
      const float scale =
          vector ? (norm ? 0.1f : 0.02f) : 1.0f / std::sqrt(static_cast<float>(parameter.shape[1]));
      std::vector<float> drawn = RandomValues(random_, parameter.numel, scale);
      for (int64_t i = 0; i < parameter.numel; ++i) {
        values[parameter.offset + i] = (norm ? 1.0f : 0.0f) + drawn[i];
      }
    }
    values = RoundedToBf16(values);
    gpu_params.push_back(Upload(values, DType::kBF16, {units[u].numel}));
    gpu_grads.push_back(
        Upload(std::vector<float>(units[u].numel, 0.0f), DType::kF32, {units[u].numel}));
    cpu_params.push_back(Host(values, {units[u].numel}));
    host_grads[u].assign(static_cast<size_t>(units[u].numel), 0.0f);
    cpu_grads.push_back(Host(host_grads[u], {units[u].numel}));
  }
  std::vector<int32_t> ids(tokens), targets(tokens);
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(config.vocab - 1));
  for (int64_t t = 0; t < tokens; ++t) {
    ids[t] = pick(random_);
    targets[t] = pick(random_);
  }

  float losses[2] = {0.0f, 0.0f};
  int index = 0;
  for (MiniLLM* model : {gpu_model->get(), cpu_model->get()}) {
    const std::vector<Tensor>& params = index == 0 ? gpu_params : cpu_params;
    const std::vector<Tensor>& grads = index == 0 ? gpu_grads : cpu_grads;
    const int root = model->root_unit();
    ASSERT_TRUE(model->BeginStep(ids.data(), targets.data()).ok());
    ASSERT_TRUE(model->EmbedForward(params[root]).ok());
    for (int layer = 0; layer < config.layers; ++layer) {
      absl::Status status = model->BlockForward(layer, params[layer]);
      ASSERT_TRUE(status.ok()) << status;
    }
    ASSERT_TRUE(model->HeadForwardBackward(params[root], grads[root], 1.0).ok());
    for (int layer = static_cast<int>(config.layers) - 1; layer >= 0; --layer) {
      absl::Status status = model->BlockBackward(layer, params[layer], grads[layer]);
      ASSERT_TRUE(status.ok()) << status;
    }
    ASSERT_TRUE(model->EmbedBackward(grads[root]).ok());
    absl::StatusOr<float> loss = model->Loss();
    ASSERT_TRUE(loss.ok()) << loss.status();
    losses[index] = *loss;
    ++index;
  }
  // The loss is a mean over 128 tokens of terms near ln(512): bf16 activations move it by
  // well under 1%.
  EXPECT_NEAR(losses[0], losses[1], 0.01 * std::fabs(losses[1]));
  // FP8: both sides quantize each operand with its own amax, but from inputs that differ by the
  // bf16 roundings above; where such a difference straddles the midpoint between two fp8 values
  // the two sides take neighbouring values, a step of 2^-3 (e4m3) or 2^-2 (e5m2) relative
  // apart, and the differences compound through two blocks and their backward. On an H100 a
  // unit's gradient came out 0.115–0.129 from the CPU's, a parameter's under 0.16
  // (bench/RESULTS.md, "FP8 linear layers in the step"); the op itself is held to the CPU's
  // within its roundings by cuda_fp8_linear_test.cc. Bounds four times the bf16 ones (0.2 a
  // unit, 0.32 a parameter) still leave a wrong scale or transpose, O(1), far outside.
  const double widen = fp8 ? 4.0 : 1.0;
  // Gradients pass through bf16 activations in every op of two blocks (each rounding 2^-9
  // relative) and bf16 attention probabilities: a few percent in norm, against O(1) if any
  // op were wrong.
  for (size_t u = 0; u < units.size(); ++u) {
    const std::vector<float> gpu_gradient = Download(gpu_grads[u]);
    for (float value : gpu_gradient) ASSERT_TRUE(std::isfinite(value)) << units[u].name;
    EXPECT_LT(RelativeDistance(gpu_gradient, host_grads[u]), 0.05 * widen) << units[u].name;
    for (const ParameterInfo& parameter : units[u].parameters) {
      std::vector<float> gpu_part(gpu_gradient.begin() + parameter.offset,
                                  gpu_gradient.begin() + parameter.offset + parameter.numel);
      std::vector<float> cpu_part(host_grads[u].begin() + parameter.offset,
                                  host_grads[u].begin() + parameter.offset + parameter.numel);
      // One parameter's gradient is a shorter sum than the whole unit's, so its share of the
      // bf16 rounding noise averages out less. From bf16 arithmetic: the longest path to a
      // gradient crosses about 30 roundings (two blocks, some 7 in the forward and 8 in the
      // backward of each), each at most 2^-8 relative; independent roundings add in quadrature,
      // sqrt(30) · 2^-8 ≈ 0.021, and the differences of nearly equal terms in the backward
      // (softmax − one-hot, RMSNorm's projection) amplify that by up to about 2, hence 0.05 for
      // a unit; a parameter with a few thousand elements is allowed 0.08. Any wrong op moves its
      // parameters' gradients by O(1).
      EXPECT_LT(RelativeDistance(gpu_part, cpu_part), 0.08 * widen) << parameter.name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(MasksAndProducts, CudaMiniLLMTest,
                         ::testing::Values(MiniLLMCase{false, false}, MiniLLMCase{true, false},
                                           MiniLLMCase{false, true}, MiniLLMCase{true, true}),
                         [](const ::testing::TestParamInfo<MiniLLMCase>& info) {
                           return std::string(info.param.causal ? "Causal" : "NoMask") +
                                  (info.param.fp8 ? "Fp8" : "");
                         });

}  // namespace
}  // namespace fsdpd::testing
