// Linear on int8 weights (Backend::Int8Weight) on Vulkan (lavapipe, validation on) against the
// CPU reference, which multiplies by the same dequantized weights (q · scale in fp32, exact) in
// fp32: the tiled matmul (matmul.comp -DWEIGHTS_INT8) and decoding's matvec
// (matvec_int8.comp) in each layout, with fp32 x and with an fp16 MatmulInput x, on the fp32
// and the fp16 path; LinearAdd bit for bit against Linear then Add; the buffer's bytes; and each
// misuse refused with its reason. (The cooperative-matrix int8 blocks cannot run on lavapipe:
// bench/edge_bench.cc --int8 checks them on a GPU.)
//
// Tolerance, per element, with u32 = 2^-24 and u16 = 2^-11: the weights are the same values on
// both sides, so only the fp32 sums differ. In any order of summing K terms a term takes part in
// at most K − 1 additions; the CPU rounds each product x·w once more, the shaders each q·x
// product and, per read of VEC weights, the read's sum times the scale: (K + 1)·u32 relative per
// term on either side, so |Δ| ≤ (2K + 4)·u32·Σ|x·w| with second-order room. A bias adds one
// rounding on each side, 2·u32·(Σ|x·w| + |b|), and on the fp16 path the bias is stored in fp16,
// u16·|b| (the weights are int8 on both paths). An fp16 x is given to the reference as the same
// fp16 values, so the bound is unchanged.
#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "edge/cpu_backend.h"
#include "edge/quantize.h"
#include "formats/half.h"
#include "tests/edge/edge_test_support.h"

namespace fsdpd::edge {
namespace {

using testing::kU16;
using testing::kU32;
using testing::RandomValues;

using testing::LinearShape;

// [out, in] weights whose rows differ in magnitude by up to 3,000× (so the scales differ), the
// first group of row 1 zero.
std::vector<float> SpreadWeights(int64_t out, int64_t in, uint64_t seed) {
  std::vector<float> w = RandomValues(out * in, 1.0f, seed);
  const float magnitudes[] = {1.0f, 0.01f, 30.0f, 0.5f};
  for (int64_t r = 0; r < out; ++r) {
    for (int64_t c = 0; c < in; ++c) w[r * in + c] *= magnitudes[r % 4];
  }
  if (out > 1) std::fill(w.begin() + in, w.begin() + in + std::min<int64_t>(in, kInt8Group), 0.0f);
  return w;
}

// Values fp16 can hold: an fp16 x is the same on both sides.
std::vector<float> HalfValues(int64_t count, uint64_t seed) {
  std::vector<float> values = RandomValues(count, 1.0f, seed);
  for (float& value : values) value = HalfToFloat(FloatToHalf(value));
  return values;
}

class EdgeInt8Test : public ::testing::TestWithParam<VulkanOptions::Precision> {
 protected:
  void SetUp() override { Use(VulkanOptions::MatvecLayout::kAuto); }
  void TearDown() override {
    if (vulkan_ != nullptr) {
      EXPECT_EQ(vulkan_->validation_errors(), 0) << vulkan_->last_validation_error();
    }
  }
  // A new Vulkan backend with matvec_int8.comp in `layout`, after checking the one it replaces.
  void Use(VulkanOptions::MatvecLayout layout) {
    if (vulkan_ != nullptr) {
      EXPECT_EQ(vulkan_->validation_errors(), 0) << vulkan_->last_validation_error();
    }
    vulkan_.reset();
    vulkan_ = testing::ValidatedVulkan(GetParam(), layout);
    ASSERT_NE(vulkan_, nullptr);
    fp16_ = vulkan_->uses_fp16();
  }
  // Whether MatmulInput buffers are fp16 (the tests' options ask for them wherever fp16 runs).
  bool HalfInputs() const { return absl::StrContains(vulkan_->Describe(), "matmul inputs fp16"); }

  // Linear of each shape on int8 weights, the output poisoned first, within the bound above; x
  // fp32, or fp16 in a MatmulInput (written by Add, the values fp16 holds).
  void ExpectLinearsWithin(const std::vector<LinearShape>& shapes, bool half_x);

  std::unique_ptr<VulkanBackend> vulkan_;
  std::unique_ptr<Backend> cpu_ = CreateCpuBackend();
  bool fp16_ = false;
};

constexpr VulkanOptions::MatvecLayout kLayouts[] = {
    VulkanOptions::MatvecLayout::kNarrow, VulkanOptions::MatvecLayout::kWide,
    VulkanOptions::MatvecLayout::kWideWords, VulkanOptions::MatvecLayout::kWide2,
    VulkanOptions::MatvecLayout::kWide4};

void EdgeInt8Test::ExpectLinearsWithin(const std::vector<LinearShape>& shapes, bool half_x) {
  for (const LinearShape& s : shapes) {
    SCOPED_TRACE(::testing::Message() << s.rows << "x" << s.in << " · " << s.out << "x" << s.in
                                      << (s.bias ? " + bias" : "") << (half_x ? ", fp16 x" : ""));
    const std::vector<float> x =
        half_x ? HalfValues(s.rows * s.in, 31) : RandomValues(s.rows * s.in, 1.0f, 31);
    const std::vector<float> w = SpreadWeights(s.out, s.in, 32);
    const std::vector<float> b = RandomValues(s.out, 1.0f, 33);
    absl::StatusOr<Int8Tensor> tensor = QuantizeInt8("w", w.data(), s.out, s.in);
    ASSERT_TRUE(tensor.ok()) << tensor.status();
    const std::vector<float> dequantized = tensor->Dequantize();

    absl::StatusOr<std::unique_ptr<Buffer>> gpu_w = vulkan_->Int8Weight(*tensor);
    ASSERT_TRUE(gpu_w.ok()) << gpu_w.status();
    std::unique_ptr<Buffer> cpu_w = *cpu_->Int8Weight(*tensor);
    std::unique_ptr<Buffer> gpu_b = *vulkan_->Weight(b.data(), s.out);
    std::unique_ptr<Buffer> cpu_b = *cpu_->Weight(b.data(), s.out);
    const int64_t count = s.rows * s.out;
    const std::vector<float> poison(static_cast<size_t>(count), std::nanf(""));
    std::unique_ptr<Buffer> gpu_out = *vulkan_->Floats(count);
    std::unique_ptr<Buffer> cpu_out = *cpu_->Floats(count);
    ASSERT_TRUE(vulkan_->WriteFloats(*gpu_out, poison.data(), count).ok());

    std::unique_ptr<Buffer> gpu_x = *vulkan_->Floats(s.rows * s.in);
    std::unique_ptr<Buffer> cpu_x = *cpu_->Floats(s.rows * s.in);
    ASSERT_TRUE(vulkan_->WriteFloats(*gpu_x, x.data(), s.rows * s.in).ok());
    ASSERT_TRUE(cpu_->WriteFloats(*cpu_x, x.data(), s.rows * s.in).ok());
    std::unique_ptr<Buffer> half, gpu_zeros;  // alive until the work is done
    if (half_x) {
      // x + 0 into the fp16 buffer: x itself, as RmsNorm or Silu would write it.
      const std::vector<float> zeros(x.size(), 0.0f);
      gpu_zeros = *vulkan_->Floats(s.rows * s.in);
      ASSERT_TRUE(vulkan_->WriteFloats(*gpu_zeros, zeros.data(), s.rows * s.in).ok());
      half = *vulkan_->MatmulInput(s.rows * s.in);
      ASSERT_TRUE(vulkan_->Add(*gpu_x, *gpu_zeros, s.rows * s.in, *half).ok());
    }
    absl::Status linear =
        vulkan_->Linear(half_x ? *half : *gpu_x, **gpu_w, s.bias ? gpu_b.get() : nullptr, s.rows,
                        s.in, s.out, *gpu_out);
    ASSERT_TRUE(linear.ok()) << linear;
    ASSERT_TRUE(
        cpu_->Linear(*cpu_x, *cpu_w, s.bias ? cpu_b.get() : nullptr, s.rows, s.in, s.out, *cpu_out)
            .ok());
    std::vector<float> got(static_cast<size_t>(count)), want(got.size());
    ASSERT_TRUE(vulkan_->ReadFloats(*gpu_out, got.data(), count).ok());
    ASSERT_TRUE(cpu_->ReadFloats(*cpu_out, want.data(), count).ok());
    double worst_excess = -1e300;
    size_t worst = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_TRUE(std::isfinite(got[i])) << "out[" << i << "] is " << got[i];
      const int64_t r = static_cast<int64_t>(i) / s.out, c = static_cast<int64_t>(i) % s.out;
      double magnitude = 0.0;
      for (int64_t k = 0; k < s.in; ++k) {
        magnitude += std::fabs(double(x[r * s.in + k]) * dequantized[c * s.in + k]);
      }
      double bound = (2.0 * static_cast<double>(s.in) + 4) * kU32 * magnitude;
      if (s.bias)
        bound += 2 * kU32 * (magnitude + std::fabs(b[c])) + (fp16_ ? kU16 * std::fabs(b[c]) : 0);
      const double excess = std::fabs(double(got[i]) - want[i]) - (bound + 1e-30);
      if (excess > worst_excess) {
        worst_excess = excess;
        worst = i;
      }
    }
    EXPECT_LE(worst_excess, 0.0) << "out[" << worst << "]: vulkan " << got[worst] << ", cpu "
                                 << want[worst];
  }
}

// The tiled matmul (more than 4 rows): whole 128×128 blocks, M, N and K ragged against them and
// against the groups of 32 (K = 45, 36, 520, 48: a short last group), K not a multiple of 4
// (byte loads) and tiny shapes.
const std::vector<LinearShape> kMatmulShapes = {
    {77, 45, 70, true},    {130, 256, 129, false}, {128, 128, 128, true}, {200, 520, 131, true},
    {129, 36, 257, false}, {33, 2, 300, false},    {5, 64, 70, true},     {9, 48, 17, false}};
// matvec_int8.comp (up to 4 rows): K a multiple of 16 (the wide layout's 16-byte reads: whole
// rounds of four, a remainder, fewer reads than lanes, a short last group at 1040; the wide
// words layout's rounds of sixteen words a lane: one whole round at 2048, two and a part at
// 4160, parts alone below), a multiple of 4 only (the narrow layout's words; the wide one's
// element loop), ragged K, and more columns than one dispatch dimension holds on lavapipe
// (65,535).
const std::vector<LinearShape> kMatvecShapes = {
    {4, 1024, 33, true},  {1, 2048, 300, false}, {3, 1040, 65, true},
    {2, 16, 70001, true}, {4, 24, 5, false},     {3, 1030, 33, true},
    {1, 5, 9, false},     {1, 48, 3, true},      {2, 4160, 17, true}};

TEST_P(EdgeInt8Test, TheTiledMatmulMatchesTheReference) {
  ExpectLinearsWithin(kMatmulShapes, /*half_x=*/false);
  EXPECT_TRUE(absl::StrContains(vulkan_->Describe(), "int8 weights: matvec "))
      << vulkan_->Describe();
  EXPECT_TRUE(absl::StrContains(vulkan_->Describe(), "matmul int8 tiled")) << vulkan_->Describe();
}

TEST_P(EdgeInt8Test, TheMatvecMatchesTheReferenceInEachLayout) {
  for (const VulkanOptions::MatvecLayout layout : kLayouts) {
    SCOPED_TRACE(MatvecLayoutName(layout));
    Use(layout);
    ExpectLinearsWithin(kMatvecShapes, /*half_x=*/false);
    EXPECT_TRUE(absl::StrContains(
        vulkan_->Describe(), absl::StrCat("int8 weights: matvec ", MatvecLayoutName(layout), ",")))
        << vulkan_->Describe();
  }
}

// Linear of shape s on int8 weights in the current backend, its output (poisoned first).
std::vector<float> LinearOnInt8(Backend& backend, const LinearShape& s, uint64_t seed) {
  const std::vector<float> x = RandomValues(s.rows * s.in, 1.0f, seed);
  const std::vector<float> w = SpreadWeights(s.out, s.in, seed + 1);
  const std::vector<float> b = RandomValues(s.out, 1.0f, seed + 2);
  std::unique_ptr<Buffer> xs = *backend.Floats(s.rows * s.in);
  EXPECT_TRUE(backend.WriteFloats(*xs, x.data(), s.rows * s.in).ok());
  std::unique_ptr<Buffer> ws = *backend.Int8Weight(*QuantizeInt8("w", w.data(), s.out, s.in));
  std::unique_ptr<Buffer> bs = *backend.Weight(b.data(), s.out);
  const int64_t count = s.rows * s.out;
  std::vector<float> out(static_cast<size_t>(count), std::nanf(""));
  std::unique_ptr<Buffer> outs = *backend.Floats(count);
  EXPECT_TRUE(backend.WriteFloats(*outs, out.data(), count).ok());
  const absl::Status linear =
      backend.Linear(*xs, *ws, s.bias ? bs.get() : nullptr, s.rows, s.in, s.out, *outs);
  EXPECT_TRUE(linear.ok()) << linear;
  EXPECT_TRUE(backend.ReadFloats(*outs, out.data(), count).ok());
  return out;
}

// Several columns a subgroup read x once for all of them, but add each column's products in the
// wide layout's order: the wide layout's bits, in every column of every shape (N odd, and
// columns past the last whole workgroup of 4·C).
TEST_P(EdgeInt8Test, SubgroupColumnsGiveTheWideLayoutsBits) {
  testing::ExpectSubgroupColumnsGiveTheWideBits(
      kMatvecShapes, [&](VulkanOptions::MatvecLayout layout) { Use(layout); },
      [&](const LinearShape& s) { return LinearOnInt8(*vulkan_, s, 51); });
}

// An fp16 x (MatmulInput, as RmsNorm and Silu write it where the matmul reads fp16) on the
// int8 shaders' fp16-x builds: the tiled matmul and the matvec in each layout. The fp32 path
// has no fp16 inputs.
TEST_P(EdgeInt8Test, AnFp16MatmulInputIsReadAsItIs) {
  if (!fp16_) {
    EXPECT_FALSE(HalfInputs()) << vulkan_->Describe();
    return;
  }
  ASSERT_TRUE(HalfInputs()) << vulkan_->Describe();
  ExpectLinearsWithin({{77, 45, 70, true}, {130, 256, 129, false}, {9, 48, 17, false}},
                      /*half_x=*/true);
  for (const VulkanOptions::MatvecLayout layout : kLayouts) {
    SCOPED_TRACE(MatvecLayoutName(layout));
    Use(layout);
    ExpectLinearsWithin(kMatvecShapes, /*half_x=*/true);
  }
}

// LinearAdd on int8 weights is Linear then Add, bit for bit (the product rounded to fp32, then
// added), in each layout, with and without a bias.
TEST_P(EdgeInt8Test, LinearAddIsLinearThenAddBitForBit) {
  for (const VulkanOptions::MatvecLayout layout : kLayouts) {
    SCOPED_TRACE(MatvecLayoutName(layout));
    Use(layout);
    for (const LinearShape& s : std::vector<LinearShape>{
             {1, 2048, 300, true}, {4, 1040, 65, false}, {3, 24, 5, true}, {2, 33, 70, true}}) {
      SCOPED_TRACE(::testing::Message() << s.rows << "x" << s.in << " · " << s.out);
      ASSERT_TRUE(vulkan_->FusesIntoLinear(s.rows));
      const std::vector<float> x = RandomValues(s.rows * s.in, 1.0f, 41);
      const std::vector<float> w = SpreadWeights(s.out, s.in, 42);
      const std::vector<float> b = RandomValues(s.out, 1.0f, 43);
      const std::vector<float> residual = RandomValues(s.rows * s.out, 4.0f, 44);
      std::unique_ptr<Buffer> xs = *vulkan_->Floats(s.rows * s.in);
      ASSERT_TRUE(vulkan_->WriteFloats(*xs, x.data(), s.rows * s.in).ok());
      std::unique_ptr<Buffer> ws = *vulkan_->Int8Weight(*QuantizeInt8("w", w.data(), s.out, s.in));
      std::unique_ptr<Buffer> bs = *vulkan_->Weight(b.data(), s.out);
      testing::ExpectLinearAddIsLinearThenAdd(*vulkan_, *xs, *ws, s.bias ? bs.get() : nullptr, s,
                                              residual);
    }
  }
}

// The device bytes: the int8 values padded to 16 bytes, then 2 bytes of scale per group of a
// row (padded to 4); against fp16 or fp32 weights of the same shape.
TEST_P(EdgeInt8Test, TheBufferHoldsTheValuesAndTheScalesAlone) {
  const int64_t out = 96, in = 200;  // 7 groups a row, the last of 8
  const std::vector<float> w = SpreadWeights(out, in, 51);
  absl::StatusOr<Int8Tensor> tensor = QuantizeInt8("w", w.data(), out, in);
  ASSERT_TRUE(tensor.ok()) << tensor.status();
  std::unique_ptr<Buffer> int8 = *vulkan_->Int8Weight(*tensor);
  std::unique_ptr<Buffer> plain = *vulkan_->Weight(w.data(), out * in);
  EXPECT_EQ(vulkan_->Bytes(*int8), out * in + out * 7 * 2);
  EXPECT_EQ(vulkan_->Bytes(*plain), out * in * (fp16_ ? 2 : 4));
  EXPECT_EQ(cpu_->Bytes(**cpu_->Int8Weight(*tensor)), out * in * 4);  // held dequantized
}

// An int8 weight is Linear's weight and nothing else; its shape must be the Linear's; the
// shaders read groups of 32 only (the CPU reference takes any).
TEST_P(EdgeInt8Test, MisusesAreRefusedWithTheReason) {
  const int64_t out = 8, in = 64;
  const std::vector<float> w = SpreadWeights(out, in, 52);
  std::unique_ptr<Buffer> int8 = *vulkan_->Int8Weight(*QuantizeInt8("w", w.data(), out, in));
  std::unique_ptr<Buffer> floats = *vulkan_->Floats(out * in);
  std::unique_ptr<Buffer> ids = *vulkan_->Ints(4);
  auto expect_refused = [](const absl::Status& status, const std::string& message) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), message)) << status;
  };
  const std::string only_linear = "is int8 weights (Backend::Int8Weight), which only Linear reads";
  expect_refused(vulkan_->Embedding(*int8, *ids, 4, in, *floats),
                 "Embedding: the table " + only_linear);
  expect_refused(vulkan_->RmsNorm(*floats, *int8, 1, in, 1e-6, *floats),
                 "RmsNorm: the weight " + only_linear);
  expect_refused(vulkan_->Linear(*int8, *int8, nullptr, 1, in, out, *floats),
                 "Linear: x " + only_linear);
  expect_refused(vulkan_->Linear(*floats, *floats, int8.get(), 1, in, out, *floats),
                 "Linear: the bias " + only_linear);
  expect_refused(vulkan_->Add(*floats, *floats, in, *int8), "Add: out " + only_linear);
  expect_refused(vulkan_->Linear(*floats, *int8, nullptr, 1, in / 2, out * 2, *floats),
                 "Linear: the int8 weight is 8 × 64, not out_features × in_features = 16 × 32");
  std::vector<float> host(4);
  expect_refused(vulkan_->ReadFloats(*int8, host.data(), 4),
                 "ReadFloats: the buffer " + only_linear);

  absl::StatusOr<Int8Tensor> sixteen = QuantizeInt8("layers.0.ffn.0.weight", w.data(), out, in, 16);
  ASSERT_TRUE(sixteen.ok()) << sixteen.status();
  expect_refused(vulkan_->Int8Weight(*sixteen).status(),
                 "int8 weights of layers.0.ffn.0.weight in groups of 16: the Vulkan shaders read "
                 "groups of 32");
  EXPECT_TRUE(cpu_->Int8Weight(*sixteen).ok());
  Int8Tensor broken = *QuantizeInt8("w", w.data(), out, in);
  broken.scales.pop_back();
  expect_refused(vulkan_->Int8Weight(broken).status(), "do not make a 8 × 64 tensor");
  EXPECT_TRUE(vulkan_->Finish().ok());
}

// VulkanOptions::int8_block pins the int8 matmul by the name Describe() gives it, and refuses a
// name not built here, with the list, when the first int8 weight is placed. (lavapipe has no
// cooperative matrices: the GPU's blocks are checked by name by edge_bench --int8-block.)
TEST_P(EdgeInt8Test, TheInt8MatmulIsPinnedByNameOrRefusedWithTheList) {
  const int64_t out = 8, in = 64;
  const std::vector<float> w = SpreadWeights(out, in, 53);
  const Int8Tensor tensor = *QuantizeInt8("w", w.data(), out, in);
  VulkanOptions options;
  options.validation = true;
  options.precision = GetParam();
  options.int8_block = "int8 128x512k32cm2h-s";
  std::unique_ptr<VulkanBackend> refusing = testing::VulkanWith(options);
  ASSERT_NE(refusing, nullptr);
  const absl::Status refused = refusing->Int8Weight(tensor).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(),
                                "int8 matmul 'int8 128x512k32cm2h-s' is not built here; the int8 "
                                "matmuls are "))
      << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), "int8 tiled, int8 tiled-h")) << refused;
  // Refused before any pipeline is built: the next placement is refused the same way.
  EXPECT_EQ(refusing->Int8Weight(tensor).status(), refused);
  EXPECT_EQ(refusing->validation_errors(), 0) << refusing->last_validation_error();

  options.int8_block = "int8 tiled";
  vulkan_ = testing::VulkanWith(options);
  ASSERT_NE(vulkan_, nullptr);
  ExpectLinearsWithin({kMatmulShapes[0], kMatmulShapes[3]}, /*half_x=*/false);
  EXPECT_TRUE(absl::StrContains(vulkan_->Describe(), "matmul int8 tiled")) << vulkan_->Describe();
}

INSTANTIATE_TEST_SUITE_P(Precisions, EdgeInt8Test,
                         ::testing::Values(VulkanOptions::Precision::kFp32,
                                           VulkanOptions::Precision::kFp16),
                         [](const auto& info) {
                           return info.param == VulkanOptions::Precision::kFp32 ? "fp32" : "fp16";
                         });

}  // namespace
}  // namespace fsdpd::edge
