// Analytic FLOPs and bytes of the ops whose cost dominates: linear and attention.
#include <vector>

#include "gtest/gtest.h"
#include "worker/profiler/op_cost.h"

namespace fsdpd {
namespace {

// Views only carry shapes here; the cost functions never read the data, but a null data
// pointer means "absent", so every present tensor points somewhere.
char storage;

Tensor Shaped(DType dtype, std::vector<int64_t> shape) {
  return Tensor{&storage, dtype, std::move(shape)};
}

TEST(ProfilerOpCostTest, LinearForwardIsTwoMnkPlusBias) {
  const int64_t m = 32, k = 64, n = 48;
  const Tensor x = Shaped(DType::kF32, {2, 16, k});  // M = 2·16 rows
  const Tensor weight = Shaped(DType::kF32, {n, k});
  const Tensor bias = Shaped(DType::kF32, {n});
  const Tensor out = Shaped(DType::kF32, {2, 16, n});
  const OpCost without_bias = LinearForwardCost(x, weight, Tensor{}, out);
  EXPECT_DOUBLE_EQ(without_bias.flops, 2.0 * m * n * k);
  EXPECT_DOUBLE_EQ(without_bias.bytes, 4.0 * (m * k + n * k + m * n));
  const OpCost with_bias = LinearForwardCost(x, weight, bias, out);
  EXPECT_DOUBLE_EQ(with_bias.flops, 2.0 * m * n * k + m * n);
  EXPECT_DOUBLE_EQ(with_bias.bytes, 4.0 * (m * k + n * k + m * n + n));
  // bf16 halves the bytes, not the FLOPs.
  const OpCost bf16 = LinearForwardCost(Shaped(DType::kBF16, {m, k}), Shaped(DType::kBF16, {n, k}),
                                        Tensor{}, Shaped(DType::kBF16, {m, n}));
  EXPECT_DOUBLE_EQ(bf16.flops, without_bias.flops);
  EXPECT_DOUBLE_EQ(bf16.bytes, without_bias.bytes / 2);
}

TEST(ProfilerOpCostTest, LinearBackwardCountsOnlyTheGradientsAskedFor) {
  const int64_t m = 8, k = 16, n = 4;
  const Tensor dout = Shaped(DType::kF32, {m, n});
  const Tensor x = Shaped(DType::kF32, {m, k});
  const Tensor weight = Shaped(DType::kF32, {n, k});
  const Tensor dx = Shaped(DType::kF32, {m, k});
  const Tensor dweight = Shaped(DType::kF32, {n, k});
  const Tensor dbias = Shaped(DType::kF32, {n});
  const OpCost full = LinearBackwardCost(dout, x, weight, dx, dweight, dbias, Write::kAccumulate);
  EXPECT_DOUBLE_EQ(full.flops, 2 * (2.0 * m * n * k) + m * n);
  // dout, x, weight read; dx written; dweight and dbias accumulated (read and written).
  EXPECT_DOUBLE_EQ(full.bytes, 4.0 * (m * n + m * k + n * k + m * k + 2 * n * k + 2 * n));
  const OpCost weight_only =
      LinearBackwardCost(dout, x, weight, Tensor{}, dweight, Tensor{}, Write::kAccumulate);
  EXPECT_DOUBLE_EQ(weight_only.flops, 2.0 * m * n * k);
  EXPECT_DOUBLE_EQ(weight_only.bytes, 4.0 * (m * n + m * k + 2 * n * k));
  // Overwritten gradients are written, not read.
  const OpCost overwritten =
      LinearBackwardCost(dout, x, weight, dx, dweight, dbias, Write::kOverwrite);
  EXPECT_DOUBLE_EQ(overwritten.flops, full.flops);
  EXPECT_DOUBLE_EQ(overwritten.bytes, 4.0 * (m * n + m * k + n * k + m * k + n * k + n));
}

TEST(ProfilerOpCostTest, AttentionIsFourBssdForwardAndTenBackward) {
  const int64_t b = 2, s = 8, d = 12, heads = 3;
  const Tensor qkv = Shaped(DType::kF32, {b, s, 3 * d});
  const Tensor out = Shaped(DType::kF32, {b, s, d});
  const Tensor lse = Shaped(DType::kF32, {b, heads, s});
  const OpCost forward = AttentionForwardCost(qkv, /*causal=*/false, out, lse);
  EXPECT_DOUBLE_EQ(forward.flops, 4.0 * b * s * s * d);
  EXPECT_DOUBLE_EQ(forward.bytes, 4.0 * (b * s * 3 * d + b * s * d + b * heads * s));
  EXPECT_DOUBLE_EQ(AttentionForwardCost(qkv, /*causal=*/true, out, lse).flops, forward.flops / 2);
  const Tensor dqkv = Shaped(DType::kF32, {b, s, 3 * d});
  const OpCost backward = AttentionBackwardCost(out, qkv, out, lse, /*causal=*/false, dqkv);
  EXPECT_DOUBLE_EQ(backward.flops, 10.0 * b * s * s * d);
  EXPECT_DOUBLE_EQ(backward.bytes,
                   4.0 * (b * s * d + b * s * 3 * d + b * s * d + b * heads * s + b * s * 3 * d));
}

TEST(ProfilerOpCostTest, DescribesThePresentInputs) {
  const Tensor x = Shaped(DType::kF32, {2, 3});
  const Tensor absent;
  const Tensor weight = Shaped(DType::kBF16, {4, 3});
  EXPECT_EQ(DescribeShapes({&x, &absent, &weight}), x.Describe() + ", " + weight.Describe());
}

// Grouped-query attention does the products of its query heads: B·S²·heads·hd, whatever the kv
// heads; rotary touches only q and k, SwiGLU reads gate and up and writes half as much.
TEST(ProfilerOpCostTest, LlamaOpsCountTheirQueryHeadsAndTheirHalves) {
  const int64_t b = 2, s = 8, heads = 4, kv_heads = 2, hd = 6;
  const Tensor qkv = Shaped(DType::kBF16, {b, s, (heads + 2 * kv_heads) * hd});
  const Tensor out = Shaped(DType::kBF16, {b, s, heads * hd});
  const Tensor lse = Shaped(DType::kF32, {b, heads, s});
  EXPECT_DOUBLE_EQ(AttentionForwardCost(qkv, /*causal=*/false, out, lse).flops,
                   4.0 * b * s * s * heads * hd);
  const OpCost rotary = RotaryCost(qkv, heads, kv_heads);
  EXPECT_DOUBLE_EQ(rotary.flops, 3.0 * b * s * (heads + kv_heads) * hd);
  EXPECT_DOUBLE_EQ(rotary.bytes, 2.0 * 2.0 * b * s * (heads + kv_heads) * hd);
  const int64_t tokens = 16, ffn = 10;
  const Tensor gate_up = Shaped(DType::kBF16, {tokens, 2 * ffn});
  const Tensor activated = Shaped(DType::kBF16, {tokens, ffn});
  const OpCost forward = SwigluForwardCost(gate_up, activated);
  EXPECT_DOUBLE_EQ(forward.flops, 5.0 * tokens * ffn);
  EXPECT_DOUBLE_EQ(forward.bytes, 2.0 * (2 * tokens * ffn + tokens * ffn));
  const OpCost backward = SwigluBackwardCost(activated, gate_up, gate_up, Tensor{});
  EXPECT_DOUBLE_EQ(backward.flops, 9.0 * tokens * ffn);
  EXPECT_DOUBLE_EQ(backward.bytes, 2.0 * (tokens * ffn + 4 * tokens * ffn));
}

}  // namespace
}  // namespace fsdpd
