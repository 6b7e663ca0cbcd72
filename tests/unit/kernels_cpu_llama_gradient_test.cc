// The CPU kernels Llama adds (grouped-query attention, rotary positions, SwiGLU): each forward
// against its definition computed directly in double, each backward against central finite
// differences of its forward, with the loss, step and tolerances of
// tests/unit/kernels_cpu_gradient_test.cc (its header says why they separate a right gradient
// from a wrong term).
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/rotary.h"
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

struct GroupedCase {
  int64_t kv_heads;
  bool causal;
};

class GroupedAttentionGradientTest : public ::testing::TestWithParam<GroupedCase> {};

// 4 query heads over 2 kv heads (groups of two) and over 1 (every query head shares one).
TEST_P(GroupedAttentionGradientTest, MatchesTheDefinitionAndFiniteDifferences) {
  const GroupedCase c = GetParam();
  std::mt19937 random(static_cast<unsigned>(11 + c.kv_heads + (c.causal ? 10 : 0)));
  const int64_t heads = 4, head_dim = 3;
  const AttentionShape shape{2, 5, heads, heads * head_dim, c.kv_heads};
  const int64_t stride = (heads + 2 * c.kv_heads) * head_dim;
  std::vector<float> qkv = RandomVector(shape.batch * shape.seq * stride, &random);
  const std::vector<float> projection = RandomVector(shape.batch * shape.seq * shape.dim, &random);
  std::vector<float> out(projection.size());
  std::vector<float> lse(static_cast<size_t>(shape.batch * heads * shape.seq));
  auto loss = [&] {
    AttentionForward(qkv.data(), shape, c.causal, out.data(), lse.data());
    return Dot(out, projection);
  };
  loss();
  // Every query head against a direct softmax in double over its own kv head h / group.
  const int64_t group = heads / c.kv_heads;
  for (int64_t b = 0; b < shape.batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      const float* rows = qkv.data() + b * shape.seq * stride;
      const int64_t k_column = shape.dim + (h / group) * head_dim;
      const int64_t v_column = shape.dim + c.kv_heads * head_dim + (h / group) * head_dim;
      for (int64_t i = 0; i < shape.seq; ++i) {
        std::vector<double> weights(static_cast<size_t>(shape.seq), 0.0);
        double total = 0.0;
        for (int64_t j = 0; j < shape.seq; ++j) {
          if (c.causal && j > i) continue;
          double score = 0.0;
          for (int64_t d = 0; d < head_dim; ++d) {
            score += static_cast<double>(rows[i * stride + h * head_dim + d]) *
                     rows[j * stride + k_column + d];
          }
          weights[j] = std::exp(score / std::sqrt(static_cast<double>(head_dim)));
          total += weights[j];
        }
        EXPECT_NEAR(lse[(b * heads + h) * shape.seq + i], std::log(total), 1e-5);
        for (int64_t d = 0; d < head_dim; ++d) {
          double expected = 0.0;
          for (int64_t j = 0; j < shape.seq; ++j) {
            expected += weights[j] / total * rows[j * stride + v_column + d];
          }
          EXPECT_NEAR(out[(b * shape.seq + i) * shape.dim + h * head_dim + d], expected, 1e-5)
              << "batch " << b << ", head " << h << ", query " << i;
        }
      }
    }
  }
  std::vector<float> dqkv(qkv.size(), 99.0f);  // must be overwritten
  AttentionBackward(projection.data(), qkv.data(), out.data(), lse.data(), shape, c.causal,
                    dqkv.data());
  ExpectMatchesFiniteDifferences("grouped attention dqkv", &qkv, dqkv, loss);
}

INSTANTIATE_TEST_SUITE_P(Groups, GroupedAttentionGradientTest,
                         ::testing::Values(GroupedCase{2, true}, GroupedCase{2, false},
                                           GroupedCase{1, true}),
                         [](const ::testing::TestParamInfo<GroupedCase>& info) {
                           return std::string("KvHeads") + std::to_string(info.param.kv_heads) +
                                  (info.param.causal ? "Causal" : "NoMask");
                         });

// kv_heads equal to heads (or 0) is plain multi-head attention: the very same bits.
TEST(KernelsCpuLlamaTest, KvHeadsEqualToHeadsIsMultiHeadAttention) {
  std::mt19937 random(21);
  const AttentionShape plain{2, 6, 3, 12};
  AttentionShape grouped = plain;
  grouped.kv_heads = 3;
  const std::vector<float> qkv = RandomVector(2 * 6 * 36, &random);
  const std::vector<float> dout = RandomVector(2 * 6 * 12, &random);
  std::vector<float> out(dout.size()), out_grouped(dout.size()), lse(36), lse_grouped(36);
  AttentionForward(qkv.data(), plain, true, out.data(), lse.data());
  AttentionForward(qkv.data(), grouped, true, out_grouped.data(), lse_grouped.data());
  EXPECT_EQ(out, out_grouped);
  EXPECT_EQ(lse, lse_grouped);
  std::vector<float> dqkv(qkv.size()), dqkv_grouped(qkv.size());
  AttentionBackward(dout.data(), qkv.data(), out.data(), lse.data(), plain, true, dqkv.data());
  AttentionBackward(dout.data(), qkv.data(), out.data(), lse.data(), grouped, true,
                    dqkv_grouped.data());
  EXPECT_EQ(dqkv, dqkv_grouped);
}

// Hugging Face's apply_rotary_pos_emb in double: x·cos + rotate_half(x)·sin.
double RotatedValue(const float* head, int64_t i, int64_t head_dim, int64_t position,
                    double theta) {
  const int64_t half = head_dim / 2;
  const int64_t pair = i % half;
  const double angle =
      position * std::pow(theta, -2.0 * static_cast<double>(pair) / static_cast<double>(head_dim));
  const double rotated_half = i < half ? -head[i + half] : head[i - half];
  return head[i] * std::cos(angle) + rotated_half * std::sin(angle);
}

TEST(KernelsCpuLlamaTest, RotaryMatchesTheDefinitionAndItsInverseUndoesIt) {
  std::mt19937 random(22);
  const RotaryShape shape{2, 7, 4, 2, 6};
  const int64_t stride = (shape.heads + 2 * shape.kv_heads) * shape.head_dim;
  const double theta = 500.0;  // small, so that positions 0..6 turn the pairs far
  const std::vector<float> original = RandomVector(shape.batch * shape.seq * stride, &random);
  std::vector<float> qkv = original;
  Rotary(qkv.data(), shape, theta, /*inverse=*/false);
  const int64_t q_and_k = (shape.heads + shape.kv_heads) * shape.head_dim;
  for (int64_t b = 0; b < shape.batch; ++b) {
    for (int64_t s = 0; s < shape.seq; ++s) {
      const int64_t row = (b * shape.seq + s) * stride;
      for (int64_t c = 0; c < stride; ++c) {
        const int64_t index = row + c;
        if (c >= q_and_k) {  // v stays
          EXPECT_EQ(qkv[index], original[index]);
          continue;
        }
        const float* head = original.data() + row + (c / shape.head_dim) * shape.head_dim;
        EXPECT_NEAR(qkv[index], RotatedValue(head, c % shape.head_dim, shape.head_dim, s, theta),
                    1e-5)
            << "position " << s << ", column " << c;
      }
    }
  }
  Rotary(qkv.data(), shape, theta, /*inverse=*/true);
  for (size_t i = 0; i < qkv.size(); ++i) EXPECT_NEAR(qkv[i], original[i], 4e-6);
}

// The backward of an orthogonal map is its transpose: the inverse rotation of dL/dout.
TEST(KernelsCpuLlamaTest, RotaryGradientIsTheInverseRotation) {
  std::mt19937 random(23);
  const RotaryShape shape{1, 5, 2, 1, 4};
  const int64_t count = shape.seq * (shape.heads + 2 * shape.kv_heads) * shape.head_dim;
  std::vector<float> x = RandomVector(count, &random);
  const std::vector<float> projection = RandomVector(count, &random);
  std::vector<float> rotated(x.size());
  auto loss = [&] {
    rotated = x;
    Rotary(rotated.data(), shape, 10.0, false);
    return Dot(rotated, projection);
  };
  std::vector<float> dx = projection;
  Rotary(dx.data(), shape, 10.0, /*inverse=*/true);
  ExpectMatchesFiniteDifferences("rotary dx", &x, dx, loss);
}

TEST(KernelsCpuLlamaTest, Swiglu) {
  std::mt19937 random(24);
  const int64_t rows = 3, ffn = 5;
  std::vector<float> gate_up = RandomVector(rows * 2 * ffn, &random, 2.0f);
  const std::vector<float> projection = RandomVector(rows * ffn, &random);
  std::vector<float> out(static_cast<size_t>(rows * ffn));
  auto loss = [&] {
    SwigluForward(gate_up.data(), rows, ffn, out.data());
    return Dot(out, projection);
  };
  loss();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < ffn; ++i) {
      const double gate = gate_up[r * 2 * ffn + i];
      const double up = gate_up[r * 2 * ffn + ffn + i];
      EXPECT_NEAR(out[r * ffn + i], gate / (1.0 + std::exp(-gate)) * up, 1e-5);
    }
  }
  const std::vector<float> forward_out = out;
  std::vector<float> dgate_up(gate_up.size(), 99.0f), recomputed(out.size(), 99.0f);
  SwigluBackward(projection.data(), gate_up.data(), rows, ffn, dgate_up.data(), recomputed.data());
  EXPECT_EQ(recomputed, forward_out);  // the recompute is SwigluForward's output, bit for bit
  ExpectMatchesFiniteDifferences("swiglu dgate_up", &gate_up, dgate_up, loss);
  // In place over gate_up: the same gradient.
  std::vector<float> in_place = gate_up;
  SwigluBackward(projection.data(), in_place.data(), rows, ffn, in_place.data(), nullptr);
  EXPECT_EQ(in_place, dgate_up);
}

}  // namespace
}  // namespace fsdpd::cpu
