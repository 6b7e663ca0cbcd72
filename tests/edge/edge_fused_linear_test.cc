// Backend::FusedLinear on Vulkan (lavapipe, validation on): decoding's RMSNorm folded into the
// projection after it, SiLU into ffn.0's, the qkv rows written into the cache at an offset,
// against the CPU reference running the ops apart (RmsNorm, Linear, Silu), on fp16 and int8
// weights, in matvec.comp's two layouts, on the fp32 and the fp16 path, and a plain Linear of
// the same shapes. Each misuse is refused with its reason. (The residual add, the other fold, is
// bit for bit: edge_kernels_test.)
//
// Tolerances, per element, with u32 = 2^-24 and u16 = 2^-11. Let z_k = x_k·g_k·r, r =
// rsqrt(mean(x²) + eps), and M = Σ_k |w_k·z_k|, all in double:
//  - the reference's z_k is within (K + 8)·u32 relative of z_k (rmsnorm's bound,
//    edge_kernels_test), so its product is off by (K + 8)·u32·M before its own dot product's
//    K·u32·M; the shader sums the same K products of x_k·g_k in fp32 (K·u32·M, with one
//    rounding of each x_k·g_k: u32·M), then scales by its own r, computed from its own sum of
//    squares: (K + 8)·u32·M. Together |Δ| ≤ (4K + 17)·u32·M.
//  - The bias: 2·u32·(M + |b|) for one more rounding on each side.
//  - fp16 weights: w and g are fp16 on the shader's side (x is not rounded; the reference's
//    fp32 ones are exact), (2·u16 + u16²)·M, and the bias u16·|b|. int8 weights are the same
//    values on both sides (q · scale, exact); the norm weight and bias are fp16 as above.
//  - SiLU after it: silu' ≤ 1.1, so the product's bound times 1.1, plus silu's own
//    (8 + 2|y|)·2·u32·max(|silu(y)|, |y|) (edge_kernels_test).
//  - A plain Linear (no norm): the matmul bound of edge_kernels_test and edge_int8_test,
//    (2K + 4)·u32·Σ|x·w| (the int8 shader rounds each read's sum times its scale once more),
//    with (2·u16 + u16²)·Σ|x·w| for fp16 weights and x, and the bias terms above.
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "absl/strings/match.h"
#include "edge/cpu_backend.h"
#include "edge/quantize.h"
#include "tests/edge/edge_test_support.h"

namespace fsdpd::edge {
namespace {

using testing::kU16;
using testing::kU32;
using testing::LinearShape;
using testing::RandomValues;

constexpr double kEps = 1e-5;

enum class Weights { kPlain, kInt8 };

// The matvec layout a backend runs, and its name for traces.
struct Matvec {
  VulkanOptions::MatvecLayout layout;
  const char* name;
};

class EdgeFusedLinearTest : public ::testing::TestWithParam<VulkanOptions::Precision> {
 protected:
  void SetUp() override {
    cpu_ = CreateCpuBackend();
    Use(Matvec{VulkanOptions::MatvecLayout::kAuto, "auto"});
  }
  void TearDown() override {
    if (vulkan_ != nullptr) {
      EXPECT_EQ(vulkan_->validation_errors(), 0) << vulkan_->last_validation_error();
    }
  }
  void Use(const Matvec& matvec) {
    if (vulkan_ != nullptr) {
      EXPECT_EQ(vulkan_->validation_errors(), 0) << vulkan_->last_validation_error();
    }
    vulkan_.reset();
    VulkanOptions options;
    options.validation = true;
    options.precision = GetParam();
    options.matvec_layout = matvec.layout;
    options.matmul_inputs = VulkanOptions::MatmulInputs::kFp16;
    vulkan_ = testing::VulkanWith(options);
    ASSERT_NE(vulkan_, nullptr);
    fp16_ = vulkan_->uses_fp16();
  }
  std::unique_ptr<Buffer> Upload(Backend& backend, const std::vector<float>& values) {
    std::unique_ptr<Buffer> buffer = *backend.Floats(static_cast<int64_t>(values.size()));
    EXPECT_TRUE(backend.WriteFloats(*buffer, values.data(), values.size()).ok());
    return buffer;
  }
  std::vector<float> Read(Backend& backend, Buffer& buffer, int64_t count) {
    std::vector<float> values(static_cast<size_t>(count));
    EXPECT_TRUE(backend.ReadFloats(buffer, values.data(), count).ok());
    return values;
  }

  // FusedLinear with a norm (and SiLU where `silu`) against RmsNorm, Linear (and Silu) on the
  // CPU, on `weights` of shape s, outputs poisoned first.
  // Without `norm`, Linear against Linear.
  void ExpectNormLinear(const LinearShape& s, bool silu, Weights weights, uint64_t seed,
                        bool norm = true);

  std::unique_ptr<VulkanBackend> vulkan_;
  std::unique_ptr<Backend> cpu_;
  bool fp16_ = false;
};

void EdgeFusedLinearTest::ExpectNormLinear(const LinearShape& s, bool silu, Weights weights,
                                           uint64_t seed, bool norm) {
  SCOPED_TRACE(::testing::Message()
               << s.rows << "x" << s.in << " · " << s.out << (norm ? "" : ", no norm")
               << (silu ? ", silu" : "") << (weights == Weights::kInt8 ? ", int8" : ""));
  // A residual of a few units, as decoding's hidden state; norm weights near 1 but spread.
  const std::vector<float> x = RandomValues(s.rows * s.in, 3.0f, seed);
  std::vector<float> g = RandomValues(s.in, 0.3f, seed + 1);
  for (float& value : g) value += 1.0f;
  std::vector<float> w = RandomValues(s.out * s.in, 1.0f, seed + 2);
  const std::vector<float> b = RandomValues(s.out, 1.0f, seed + 3);
  std::unique_ptr<Buffer> w_gpu;
  if (weights == Weights::kInt8) {
    absl::StatusOr<Int8Tensor> quantized = QuantizeInt8("w", w.data(), s.out, s.in);
    ASSERT_TRUE(quantized.ok()) << quantized.status();
    w = quantized->Dequantize();  // the reference multiplies by the values the shader reads
    absl::StatusOr<std::unique_ptr<Buffer>> placed = vulkan_->Int8Weight(*quantized);
    ASSERT_TRUE(placed.ok()) << placed.status();
    w_gpu = std::move(*placed);
  } else {
    w_gpu = *vulkan_->Weight(w.data(), static_cast<int64_t>(w.size()));
  }
  std::unique_ptr<Buffer> x_gpu = Upload(*vulkan_, x), x_cpu = Upload(*cpu_, x);
  std::unique_ptr<Buffer> g_gpu = *vulkan_->Weight(g.data(), s.in);
  std::unique_ptr<Buffer> g_cpu = *cpu_->Weight(g.data(), s.in);
  std::unique_ptr<Buffer> w_cpu = *cpu_->Weight(w.data(), static_cast<int64_t>(w.size()));
  std::unique_ptr<Buffer> b_gpu = *vulkan_->Weight(b.data(), s.out);
  std::unique_ptr<Buffer> b_cpu = *cpu_->Weight(b.data(), s.out);
  const int64_t count = s.rows * s.out;
  std::unique_ptr<Buffer> out_gpu =
      Upload(*vulkan_, std::vector<float>(static_cast<size_t>(count), std::nanf("")));

  LinearFusion fusion;
  fusion.norm = norm ? g_gpu.get() : nullptr;
  fusion.eps = kEps;
  fusion.silu = silu;
  ASSERT_TRUE(vulkan_
                  ->FusedLinear(*x_gpu, *w_gpu, s.bias ? b_gpu.get() : nullptr, s.rows, s.in, s.out,
                                *out_gpu, fusion)
                  .ok());
  std::unique_ptr<Buffer> normed = *cpu_->Floats(s.rows * s.in);
  std::unique_ptr<Buffer> product = *cpu_->Floats(count), want = *cpu_->Floats(count);
  if (norm) {
    ASSERT_TRUE(cpu_->RmsNorm(*x_cpu, *g_cpu, s.rows, s.in, kEps, *normed).ok());
  }
  ASSERT_TRUE(cpu_->Linear(norm ? *normed : *x_cpu, *w_cpu, s.bias ? b_cpu.get() : nullptr, s.rows,
                           s.in, s.out, *product)
                  .ok());
  if (silu) {
    ASSERT_TRUE(cpu_->Silu(*product, count, *want).ok());
  }
  const std::vector<float> got = Read(*vulkan_, *out_gpu, count);
  const std::vector<float> before = Read(*cpu_, *product, count);
  const std::vector<float> expected = silu ? Read(*cpu_, *want, count) : before;

  const bool fp16_weights = fp16_ && weights == Weights::kPlain;
  const bool fp16_small = fp16_;  // the norm weight and the bias, on either kind of weights
  double worst_excess = -1e300;
  int64_t worst = 0;
  double worst_bound = 0.0;
  for (int64_t r = 0; r < s.rows; ++r) {
    double squares = 0.0;
    for (int64_t k = 0; k < s.in; ++k) squares += double(x[r * s.in + k]) * x[r * s.in + k];
    const double rs = 1.0 / std::sqrt(squares / double(s.in) + kEps);
    for (int64_t c = 0; c < s.out; ++c) {
      double magnitude = 0.0;
      for (int64_t k = 0; k < s.in; ++k) {
        const double z = norm ? double(x[r * s.in + k]) * g[k] * rs : double(x[r * s.in + k]);
        magnitude += std::fabs(double(w[c * s.in + k]) * z);
      }
      double bound =
          (norm ? 4.0 * double(s.in) + 17.0 : 2.0 * double(s.in) + 4.0) * kU32 * magnitude;
      if (fp16_weights) bound += (2 * kU16 + kU16 * kU16) * magnitude;
      // g only (a norm's weight is fp16 on either kind of weights).
      if (norm && fp16_small && !fp16_weights) bound += (kU16 + kU16 * kU16) * magnitude;
      if (s.bias) {
        bound +=
            2 * kU32 * (magnitude + std::fabs(b[c])) + (fp16_small ? kU16 * std::fabs(b[c]) : 0);
      }
      const int64_t i = r * s.out + c;
      if (silu) {
        const double y = before[i];
        bound = 1.1 * bound + (8 + 2 * std::fabs(y)) * 2 * kU32 *
                                  std::max(std::fabs(double(expected[i])), std::fabs(y));
      }
      ASSERT_TRUE(std::isfinite(got[i])) << "out[" << i << "] is " << got[i];
      const double excess = std::fabs(double(got[i]) - expected[i]) - bound;
      if (excess > worst_excess) {
        worst_excess = excess;
        worst = i;
        worst_bound = bound;
      }
    }
  }
  EXPECT_LE(worst_excess, 0.0) << "out[" << worst << "]: vulkan " << got[worst] << ", cpu "
                               << expected[worst] << ", bound " << worst_bound;
}

constexpr Matvec kMatvecs[] = {{VulkanOptions::MatvecLayout::kNarrow, "narrow"},
                               {VulkanOptions::MatvecLayout::kWide, "wide"},
                               {VulkanOptions::MatvecLayout::kWide2, "wide, 2 columns"},
                               {VulkanOptions::MatvecLayout::kWide4, "wide, 4 columns"}};

// The shapes cover matvec.comp's vector path (K a multiple of 8, whole rounds of reads and a
// remainder), its element path (K ragged), 1 to 4 rows, with and without a bias, and one row of
// K up to ffn.2's 8,192.
const std::vector<LinearShape> kShapes = {
    {1, 2048, 96, true},  {4, 1032, 65, false}, {3, 24, 5, true},    {2, 33, 70, true},
    {1, 1032, 65, false}, {1, 8192, 24, true},  {1, 6144, 9, false}, {1, 24, 5, true}};

TEST_P(EdgeFusedLinearTest, TheFoldedNormIsRmsNormThenLinear) {
  for (const Matvec& matvec : kMatvecs) {
    SCOPED_TRACE(matvec.name);
    Use(matvec);
    uint64_t seed = 100;
    for (const LinearShape& s : kShapes) {
      ExpectNormLinear(s, /*silu=*/false, Weights::kPlain, seed += 10);
    }
  }
}

TEST_P(EdgeFusedLinearTest, TheFoldedNormAndSiluAreRmsNormLinearThenSilu) {
  for (const Matvec& matvec : kMatvecs) {
    SCOPED_TRACE(matvec.name);
    Use(matvec);
    uint64_t seed = 200;
    for (const LinearShape& s : kShapes) {
      ExpectNormLinear(s, /*silu=*/true, Weights::kPlain, seed += 10);
    }
  }
}

// A plain projection (no norm) at the same shapes, fp16 and int8 weights: the path the
// residual-add folds (out_proj, ffn.2) take.
TEST_P(EdgeFusedLinearTest, APlainLinearIsTheReferences) {
  for (const Matvec& matvec : kMatvecs) {
    SCOPED_TRACE(matvec.name);
    Use(matvec);
    uint64_t seed = 400;
    for (const LinearShape& s : kShapes) {
      ExpectNormLinear(s, /*silu=*/false, Weights::kPlain, seed += 10, /*norm=*/false);
      ExpectNormLinear(s, /*silu=*/false, Weights::kInt8, seed += 10, /*norm=*/false);
    }
  }
}

// int8 weights take matvec_int8.comp, whose vector path reads 16 weights a lane (K a multiple
// of 16) and whose element path takes the rest.
TEST_P(EdgeFusedLinearTest, TheFoldsHoldOnInt8Weights) {
  for (const Matvec& matvec : kMatvecs) {
    SCOPED_TRACE(matvec.name);
    Use(matvec);
    uint64_t seed = 300;
    for (const LinearShape& s : std::vector<LinearShape>{{1, 2048, 96, true},
                                                         {4, 1040, 65, false},
                                                         {2, 33, 70, true},
                                                         {1, 1040, 33, false},
                                                         {1, 8192, 20, true},
                                                         {1, 1032, 7, true}}) {
      ExpectNormLinear(s, /*silu=*/false, Weights::kInt8, seed += 10);
      ExpectNormLinear(s, /*silu=*/true, Weights::kInt8, seed += 10);
    }
  }
}

// out_offset places the rows: the floats before and after them keep their values, and the rows
// are, bit for bit, what the same fold writes at offset 0.
TEST_P(EdgeFusedLinearTest, AnOffsetWritesOnlyItsRows) {
  const int64_t rows = 2, in = 64, out = 48, offset = 3 * out + 5, total = offset + rows * out + 7;
  const std::vector<float> x = RandomValues(rows * in, 2.0f, 41),
                           w = RandomValues(out * in, 1.0f, 42);
  std::unique_ptr<Buffer> xs = Upload(*vulkan_, x);
  std::unique_ptr<Buffer> ws = *vulkan_->Weight(w.data(), out * in);
  std::vector<float> g(static_cast<size_t>(in), 1.25f);
  std::unique_ptr<Buffer> gs = *vulkan_->Weight(g.data(), in);
  std::vector<float> sentinel(static_cast<size_t>(total));
  for (int64_t i = 0; i < total; ++i) sentinel[i] = 1000.0f + static_cast<float>(i);
  std::unique_ptr<Buffer> placed = Upload(*vulkan_, sentinel);
  std::unique_ptr<Buffer> alone = *vulkan_->Floats(rows * out);
  LinearFusion fusion;
  fusion.norm = gs.get();
  fusion.eps = kEps;
  ASSERT_TRUE(vulkan_->FusedLinear(*xs, *ws, nullptr, rows, in, out, *alone, fusion).ok());
  fusion.out_offset = offset;
  ASSERT_TRUE(vulkan_->FusedLinear(*xs, *ws, nullptr, rows, in, out, *placed, fusion).ok());
  const std::vector<float> got = Read(*vulkan_, *placed, total);
  const std::vector<float> want = Read(*vulkan_, *alone, rows * out);
  for (int64_t i = 0; i < total; ++i) {
    if (i >= offset && i < offset + rows * out) {
      ASSERT_EQ(got[i], want[i - offset]) << "out[" << i << "]";
      ASSERT_NE(got[i], sentinel[i]) << "out[" << i << "] was not written";
    } else {
      ASSERT_EQ(got[i], sentinel[i]) << "out[" << i << "] outside the rows was written";
    }
  }
}

TEST_P(EdgeFusedLinearTest, MisusesAreRefusedWithTheReason) {
  const std::vector<float> x = RandomValues(5 * 8, 1.0f, 51), w = RandomValues(8 * 8, 1.0f, 52);
  std::unique_ptr<Buffer> xs = Upload(*vulkan_, x), out = *vulkan_->Floats(5 * 8);
  std::unique_ptr<Buffer> ws = *vulkan_->Weight(w.data(), 64);
  std::unique_ptr<Buffer> short_norm = *vulkan_->Weight(w.data(), 4);
  LinearFusion fusion;
  EXPECT_FALSE(vulkan_->FusesIntoLinear(5));
  absl::Status refused = vulkan_->FusedLinear(*xs, *ws, nullptr, 5, 8, 8, *out, fusion);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), "up to 4 rows")) << refused;

  fusion.out_offset = 5 * 8 - 8 + 1;  // one float past the end
  refused = vulkan_->FusedLinear(*xs, *ws, nullptr, 1, 8, 8, *out, fusion);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), "fall outside out")) << refused;
  fusion.out_offset = -1;
  EXPECT_EQ(vulkan_->FusedLinear(*xs, *ws, nullptr, 1, 8, 8, *out, fusion).code(),
            absl::StatusCode::kInvalidArgument);

  fusion.out_offset = 0;
  fusion.norm = short_norm.get();
  refused = vulkan_->FusedLinear(*xs, *ws, nullptr, 1, 8, 8, *out, fusion);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), "norm weight holds fewer")) << refused;

  // A folded norm reads the fp32 residual; an fp16 MatmulInput is refused.
  std::unique_ptr<Buffer> half_x = *vulkan_->MatmulInput(8);
  fusion.norm = ws.get();
  const absl::Status half = vulkan_->FusedLinear(*half_x, *ws, nullptr, 1, 8, 8, *out, fusion);
  if (vulkan_->Describe().find("matmul inputs fp16") != std::string::npos) {
    EXPECT_EQ(half.code(), absl::StatusCode::kInvalidArgument) << half;
  } else {
    EXPECT_TRUE(half.ok()) << half;  // MatmulInput is fp32 here
  }

  std::unique_ptr<Buffer> cpu_x = Upload(*cpu_, x), cpu_w = *cpu_->Weight(w.data(), 64);
  std::unique_ptr<Buffer> cpu_out = *cpu_->Floats(8);
  EXPECT_FALSE(cpu_->FusesIntoLinear(1));
  EXPECT_EQ(cpu_->FusedLinear(*cpu_x, *cpu_w, nullptr, 1, 8, 8, *cpu_out, LinearFusion{}).code(),
            absl::StatusCode::kFailedPrecondition);
}

INSTANTIATE_TEST_SUITE_P(Precisions, EdgeFusedLinearTest,
                         ::testing::Values(VulkanOptions::Precision::kFp32,
                                           VulkanOptions::Precision::kFp16),
                         [](const ::testing::TestParamInfo<VulkanOptions::Precision>& info) {
                           return info.param == VulkanOptions::Precision::kFp16 ? "fp16" : "fp32";
                         });

}  // namespace
}  // namespace fsdpd::edge
