// Every backward kernel of kernels/cpu against central finite differences of its forward.
//
// Each check turns an op's output into a scalar L = Σ out ⊙ R for a fixed random R (so
// dL/dout = R), perturbs every input element by ±h in fp32 and compares (L(+h) − L(−h)) / 2h
// with the analytic gradient. With h = 1e-2 the truncation error is O(h²) ≈ 1e-4 relative,
// and fp32 rounding of the outputs adds about 1e-7·|L|/h ≈ 1e-5·|L|; the tolerance
// |numeric − analytic| ≤ 2e-3 + 1e-2·|analytic| sits above both, yet a wrong term (a missing
// factor, a transposed product) shows up as an O(1) relative error and fails.
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/silu.h"

namespace fsdpd::cpu {
namespace {

constexpr float kStep = 1e-2f;
constexpr double kAbsoluteTolerance = 2e-3;
constexpr double kRelativeTolerance = 1e-2;

std::vector<float> RandomVector(int64_t count, std::mt19937* random, float scale = 1.0f) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> values(static_cast<size_t>(count));
  for (float& value : values) value = normal(*random);
  return values;
}

double Dot(const std::vector<float>& a, const std::vector<float>& b) {
  double sum = 0.0;
  for (size_t i = 0; i < a.size(); ++i) sum += static_cast<double>(a[i]) * b[i];
  return sum;
}

// Perturbs each element of `values` in turn and compares the central difference of `loss`
// with `analytic`.
void ExpectMatchesFiniteDifferences(const std::string& what, std::vector<float>* values,
                                    const std::vector<float>& analytic,
                                    const std::function<double()>& loss) {
  ASSERT_EQ(values->size(), analytic.size()) << what;
  int failures = 0;
  for (size_t i = 0; i < values->size(); ++i) {
    const float original = (*values)[i];
    (*values)[i] = original + kStep;
    const double plus = loss();
    (*values)[i] = original - kStep;
    const double minus = loss();
    (*values)[i] = original;
    const double numeric = (plus - minus) / (2.0 * kStep);
    const double tolerance = kAbsoluteTolerance + kRelativeTolerance * std::fabs(analytic[i]);
    if (std::fabs(numeric - analytic[i]) > tolerance && ++failures <= 5) {
      ADD_FAILURE() << what << "[" << i << "]: analytic " << analytic[i] << ", numeric " << numeric;
    }
  }
  EXPECT_EQ(failures, 0) << what;
}

TEST(KernelsCpuGradientTest, Embedding) {
  std::mt19937 random(1);
  const int64_t vocab = 7, dim = 5;
  const std::vector<int32_t> tokens = {3, 0, 6, 3, 3, 1};  // repeats must accumulate
  const int64_t count = static_cast<int64_t>(tokens.size());
  std::vector<float> weight = RandomVector(vocab * dim, &random);
  const std::vector<float> projection = RandomVector(count * dim, &random);
  std::vector<float> out(static_cast<size_t>(count * dim));
  auto loss = [&] {
    EmbeddingForward(weight.data(), tokens.data(), count, dim, out.data());
    return Dot(out, projection);
  };
  std::vector<float> dweight(weight.size(), 0.0f);
  EmbeddingBackward(projection.data(), tokens.data(), count, dim, dweight.data());
  ExpectMatchesFiniteDifferences("embedding dweight", &weight, dweight, loss);
  // Rows of tokens never seen get no gradient.
  for (int64_t d = 0; d < dim; ++d) EXPECT_EQ(dweight[2 * dim + d], 0.0f);
}

TEST(KernelsCpuGradientTest, FindInvalidToken) {
  const std::vector<int32_t> tokens = {0, 4, 5, -1};
  EXPECT_EQ(FindInvalidToken(tokens.data(), 2, 5), -1);
  EXPECT_EQ(FindInvalidToken(tokens.data(), 4, 5), 2);
  EXPECT_EQ(FindInvalidToken(tokens.data() + 3, 1, 5), 0);
}

TEST(KernelsCpuGradientTest, RmsNorm) {
  std::mt19937 random(2);
  const int64_t rows = 4, dim = 6;
  const double eps = 1.1920928955078125e-07;
  std::vector<float> x = RandomVector(rows * dim, &random);
  std::vector<float> weight = RandomVector(dim, &random);
  const std::vector<float> projection = RandomVector(rows * dim, &random);
  std::vector<float> out(x.size()), rstd(static_cast<size_t>(rows));
  auto loss = [&] {
    RmsNormForward(x.data(), weight.data(), rows, dim, eps, out.data(), rstd.data());
    return Dot(out, projection);
  };
  loss();
  // The forward itself against the definition, in double.
  for (int64_t r = 0; r < rows; ++r) {
    double mean_square = 0.0;
    for (int64_t d = 0; d < dim; ++d) mean_square += std::pow(x[r * dim + d], 2) / dim;
    const double expected_rstd = 1.0 / std::sqrt(mean_square + eps);
    EXPECT_NEAR(rstd[r], expected_rstd, 1e-6 * expected_rstd);
    for (int64_t d = 0; d < dim; ++d) {
      EXPECT_NEAR(out[r * dim + d], x[r * dim + d] * expected_rstd * weight[d], 1e-5);
    }
  }
  std::vector<float> dx(x.size()), dweight(weight.size(), 0.0f);
  RmsNormBackward(projection.data(), x.data(), weight.data(), rstd.data(), rows, dim,
                  /*accumulate_dx=*/false, dx.data(), dweight.data());
  ExpectMatchesFiniteDifferences("rmsnorm dx", &x, dx, loss);
  ExpectMatchesFiniteDifferences("rmsnorm dweight", &weight, dweight, loss);
  // Accumulating adds the same gradient to what dx held: the residual stream's sum.
  loss();  // rstd of the unperturbed x again
  std::vector<float> residual = RandomVector(rows * dim, &random);
  std::vector<float> summed = residual;
  std::vector<float> unused_dweight(weight.size(), 0.0f);
  RmsNormBackward(projection.data(), x.data(), weight.data(), rstd.data(), rows, dim,
                  /*accumulate_dx=*/true, summed.data(), unused_dweight.data());
  for (size_t i = 0; i < summed.size(); ++i) EXPECT_EQ(summed[i], residual[i] + dx[i]) << i;
  // An overwritten weight gradient ignores what was there: the sums alone, as from zero.
  std::vector<float> from_zero(weight.size(), 0.0f), overwritten(weight.size(), 1e30f);
  RmsNormBackward(projection.data(), x.data(), weight.data(), rstd.data(), rows, dim,
                  /*accumulate_dx=*/false, summed.data(), from_zero.data());
  RmsNormBackward(projection.data(), x.data(), weight.data(), rstd.data(), rows, dim,
                  /*accumulate_dx=*/false, summed.data(), overwritten.data(),
                  /*accumulate_dweight=*/false);
  EXPECT_EQ(overwritten, from_zero);
}

TEST(KernelsCpuGradientTest, Linear) {
  std::mt19937 random(3);
  const int64_t rows = 5, in_features = 4, out_features = 3;
  std::vector<float> x = RandomVector(rows * in_features, &random);
  std::vector<float> weight = RandomVector(out_features * in_features, &random);
  std::vector<float> bias = RandomVector(out_features, &random);
  const std::vector<float> projection = RandomVector(rows * out_features, &random);
  std::vector<float> out(static_cast<size_t>(rows * out_features));
  auto loss = [&] {
    LinearForward(x.data(), weight.data(), bias.data(), rows, in_features, out_features,
                  out.data());
    return Dot(out, projection);
  };
  loss();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out_features; ++o) {
      double expected = bias[o];
      for (int64_t i = 0; i < in_features; ++i) {
        expected += static_cast<double>(x[r * in_features + i]) * weight[o * in_features + i];
      }
      EXPECT_NEAR(out[r * out_features + o], expected, 1e-5);
    }
  }
  // Accumulating outputs start from a non-zero value to prove they add, not overwrite.
  std::vector<float> dx(x.size(), 99.0f), dweight(weight.size(), 0.5f), dbias(bias.size(), 0.25f);
  LinearBackward(projection.data(), x.data(), weight.data(), rows, in_features, out_features,
                 dx.data(), dweight.data(), dbias.data());
  for (float& value : dweight) value -= 0.5f;
  for (float& value : dbias) value -= 0.25f;
  ExpectMatchesFiniteDifferences("linear dx", &x, dx, loss);
  ExpectMatchesFiniteDifferences("linear dweight", &weight, dweight, loss);
  ExpectMatchesFiniteDifferences("linear dbias", &bias, dbias, loss);
  // Overwriting ignores what was there: from garbage, the same gradients as accumulated from 0.
  std::vector<float> from_zero(weight.size(), 0.0f), bias_from_zero(bias.size(), 0.0f);
  LinearBackward(projection.data(), x.data(), weight.data(), rows, in_features, out_features,
                 nullptr, from_zero.data(), bias_from_zero.data());
  std::vector<float> overwritten(weight.size(), 1e30f), bias_overwritten(bias.size(), -7.0f);
  LinearBackward(projection.data(), x.data(), weight.data(), rows, in_features, out_features,
                 nullptr, overwritten.data(), bias_overwritten.data(), /*accumulate=*/false);
  EXPECT_EQ(overwritten, from_zero);
  EXPECT_EQ(bias_overwritten, bias_from_zero);
}

TEST(KernelsCpuGradientTest, LinearWithoutBiasSkipsMissingGradients) {
  std::mt19937 random(4);
  const int64_t rows = 3, in_features = 2, out_features = 4;
  std::vector<float> x = RandomVector(rows * in_features, &random);
  std::vector<float> weight = RandomVector(out_features * in_features, &random);
  const std::vector<float> projection = RandomVector(rows * out_features, &random);
  std::vector<float> out(static_cast<size_t>(rows * out_features));
  auto loss = [&] {
    LinearForward(x.data(), weight.data(), nullptr, rows, in_features, out_features, out.data());
    return Dot(out, projection);
  };
  std::vector<float> dweight(weight.size(), 0.0f);
  LinearBackward(projection.data(), x.data(), weight.data(), rows, in_features, out_features,
                 nullptr, dweight.data(), nullptr);
  ExpectMatchesFiniteDifferences("linear (no bias) dweight", &weight, dweight, loss);
}

class AttentionGradientTest : public ::testing::TestWithParam<bool> {};

TEST_P(AttentionGradientTest, MatchesFiniteDifferences) {
  const bool causal = GetParam();
  std::mt19937 random(causal ? 5 : 6);
  const AttentionShape shape{2, 5, 2, 6};
  const int64_t head_dim = shape.dim / shape.heads;
  std::vector<float> qkv = RandomVector(shape.batch * shape.seq * 3 * shape.dim, &random);
  const std::vector<float> projection = RandomVector(shape.batch * shape.seq * shape.dim, &random);
  std::vector<float> out(projection.size());
  std::vector<float> lse(static_cast<size_t>(shape.batch * shape.heads * shape.seq));
  auto loss = [&] {
    AttentionForward(qkv.data(), shape, causal, out.data(), lse.data());
    return Dot(out, projection);
  };
  loss();
  // The forward against a direct softmax in double for one (batch, head, query).
  const int64_t b = 1, h = 1, i = 2;
  const int64_t stride = 3 * shape.dim;
  const float* base = qkv.data() + b * shape.seq * stride + h * head_dim;
  std::vector<double> weights(static_cast<size_t>(shape.seq), 0.0);
  double total = 0.0;
  for (int64_t j = 0; j < shape.seq; ++j) {
    if (causal && j > i) continue;
    double score = 0.0;
    for (int64_t d = 0; d < head_dim; ++d) {
      score += static_cast<double>(base[i * stride + d]) * base[j * stride + shape.dim + d];
    }
    weights[j] = std::exp(score / std::sqrt(static_cast<double>(head_dim)));
    total += weights[j];
  }
  EXPECT_NEAR(lse[(b * shape.heads + h) * shape.seq + i], std::log(total), 1e-5);
  for (int64_t d = 0; d < head_dim; ++d) {
    double expected = 0.0;
    for (int64_t j = 0; j < shape.seq; ++j) {
      expected += weights[j] / total * base[j * stride + 2 * shape.dim + d];
    }
    EXPECT_NEAR(out[(b * shape.seq + i) * shape.dim + h * head_dim + d], expected, 1e-5);
  }

  std::vector<float> dqkv(qkv.size(), 99.0f);  // must be overwritten
  AttentionBackward(projection.data(), qkv.data(), out.data(), lse.data(), shape, causal,
                    dqkv.data());
  ExpectMatchesFiniteDifferences(causal ? "causal attention dqkv" : "attention dqkv", &qkv, dqkv,
                                 loss);
}

INSTANTIATE_TEST_SUITE_P(MaskedAndUnmasked, AttentionGradientTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Causal" : "NoMask";
                         });

TEST(KernelsCpuGradientTest, Silu) {
  std::mt19937 random(7);
  std::vector<float> x = RandomVector(20, &random, 3.0f);
  const std::vector<float> projection = RandomVector(20, &random);
  std::vector<float> out(x.size());
  auto loss = [&] {
    SiluForward(x.data(), static_cast<int64_t>(x.size()), out.data());
    return Dot(out, projection);
  };
  loss();
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_NEAR(out[i], x[i] / (1.0 + std::exp(-static_cast<double>(x[i]))), 1e-6);
  }
  std::vector<float> dx(x.size());
  SiluBackward(projection.data(), x.data(), static_cast<int64_t>(x.size()), dx.data());
  ExpectMatchesFiniteDifferences("silu dx", &x, dx, loss);
}

// Enough tokens to span several chunks, the last one partial.
TEST(KernelsCpuGradientTest, HeadCrossEntropyAcrossChunks) {
  std::mt19937 random(8);
  const int64_t tokens = 2 * kCrossEntropyChunkRows + 37, dim = 4, vocab = 9;
  std::vector<float> x = RandomVector(tokens * dim, &random);
  std::vector<float> head = RandomVector(vocab * dim, &random);
  std::vector<int32_t> targets(static_cast<size_t>(tokens));
  for (auto& target : targets) target = static_cast<int32_t>(random() % vocab);
  auto loss = [&] {
    return HeadCrossEntropy(x.data(), head.data(), targets.data(), tokens, dim, vocab, 1.0, nullptr,
                            nullptr);
  };
  // The loss against full logits in double.
  double expected = 0.0;
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<double> logits(static_cast<size_t>(vocab));
    double maximum = -1e300;
    for (int64_t v = 0; v < vocab; ++v) {
      for (int64_t d = 0; d < dim; ++d)
        logits[v] += static_cast<double>(x[t * dim + d]) * head[v * dim + d];
      maximum = std::max(maximum, logits[v]);
    }
    double sum = 0.0;
    for (double logit : logits) sum += std::exp(logit - maximum);
    expected += maximum + std::log(sum) - logits[targets[t]];
  }
  EXPECT_NEAR(loss(), expected / tokens, 1e-5);

  const double scale = 0.5;
  std::vector<float> dx(x.size(), 99.0f), dhead(head.size(), 1.0f);
  const double loss_value = HeadCrossEntropy(x.data(), head.data(), targets.data(), tokens, dim,
                                             vocab, scale, dx.data(), dhead.data());
  EXPECT_NEAR(loss_value, expected / tokens, 1e-5);  // loss_scale scales gradients only
  for (float& value : dx) value /= scale;
  for (float& value : dhead) value = (value - 1.0f) / scale;
  ExpectMatchesFiniteDifferences("cross-entropy dhead", &head, dhead, loss);
  // dx per token is O(1/tokens); checking the first two chunks' boundaries is enough and keeps
  // the test fast. Scale the loss up so that the tolerance applies at the gradient's scale.
  std::vector<float> some_x(x.begin() + (kCrossEntropyChunkRows - 1) * dim,
                            x.begin() + (kCrossEntropyChunkRows + 1) * dim);
  std::vector<float> some_dx(some_x.size());
  for (size_t i = 0; i < some_x.size(); ++i) {
    some_dx[i] = dx[(kCrossEntropyChunkRows - 1) * dim + i] * tokens;
  }
  auto scaled_loss = [&] {
    std::copy(some_x.begin(), some_x.end(), x.begin() + (kCrossEntropyChunkRows - 1) * dim);
    return loss() * tokens;
  };
  ExpectMatchesFiniteDifferences("cross-entropy dx", &some_x, some_dx, scaled_loss);
}

TEST(KernelsCpuGradientTest, HeadLogitsMatchesLinear) {
  std::mt19937 random(9);
  const int64_t tokens = 3, dim = 4, vocab = 5;
  const std::vector<float> x = RandomVector(tokens * dim, &random);
  const std::vector<float> head = RandomVector(vocab * dim, &random);
  std::vector<float> logits(static_cast<size_t>(tokens * vocab));
  std::vector<float> reference(logits.size());
  HeadLogits(x.data(), head.data(), tokens, dim, vocab, logits.data());
  LinearForward(x.data(), head.data(), nullptr, tokens, dim, vocab, reference.data());
  for (size_t i = 0; i < logits.size(); ++i) EXPECT_FLOAT_EQ(logits[i], reference[i]);
}

}  // namespace
}  // namespace fsdpd::cpu
