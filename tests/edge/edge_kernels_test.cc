// Each Vulkan shader against the CPU reference backend (kernels/cpu) on random inputs, in the
// fp32 path and the fp16 path, on lavapipe with the validation layer on (zero errors).
//
// Tolerances, per element, with u32 = 2^-24 and u16 = 2^-11 (unit roundoffs):
//  - matmul (Linear): both sides sum K products in fp32 in different orders, so each is within
//    K·u32·Σ|x·w| of the exact value (the standard dot-product bound): |Δ| ≤ 2·K·u32·Σ|x·w|.
//    In fp16 both operands are rounded to fp16 first (relative error ≤ u16 each, so a product
//    is off by ≤ (2·u16 + u16²)·|x·w|) and the bias by ≤ u16·|b|: those terms are added.
//    Adding the bias rounds once more on each side: 2·u32·(Σ|x·w| + |b|) (it shows where K is
//    tiny).
//  - rmsnorm: the sum of squares (≤ dim·u32 relative each side) and inversesqrt (Vulkan allows
//    2 ULP) give ≤ (dim + 8)·u32·|y| on top of the weight's fp16 rounding (u16·|y|) in fp16.
//  - embedding: a copy, exact in fp32; fp16 rounding (≤ u16·|y|) in the fp16 path.
//  - add: one fp32 rounding on both sides: exact.
//  - silu: Vulkan's exp is within 3 + 2·|x| ULP and division 2.5 ULP, so ≤ (8 + 2|x|)·u32·2
//    relative, with |x| ≤ 4 here.
//  - attention: scores of size ≤ √head_dim·max|q|·max|k|; exp error (3 + 2|s|) ULP relative
//    per softmax weight and fp32 sums over ≤ seq keys: |Δ| ≤ (seq + 3 + 2·s_max)·4·u32·max|v|.
//  - log-softmax / cross-entropy: the sum over vocab terms (≤ vocab·u32 relative), exp and log
//    (a few ULP of |logit| size): |Δ| ≤ (vocab + 16)·u32·(1 + max|logit|).
//  - RmsNorm or Silu into a MatmulInput buffer (fp16 where the matmul reads fp16 x), then
//    Linear: the matmul's bound on the reference x, plus the producer's error on each x_k
//    carried through |w_k| (the fp16 rounding of x is the matmul bound's own 2^-11, whether
//    the producer or the matmul rounds it).
#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "edge/cpu_backend.h"
#include "edge/shaders.h"
#include "tests/edge/edge_test_support.h"

namespace fsdpd::edge {
namespace {

using testing::kU16;
using testing::kU32;
using testing::RandomValues;

using testing::LinearShape;

class EdgeKernelsTest : public ::testing::TestWithParam<VulkanOptions::Precision> {
 protected:
  void SetUp() override {
    vulkan_ = testing::ValidatedVulkan(GetParam());
    ASSERT_NE(vulkan_, nullptr);
    cpu_ = CreateCpuBackend();
    fp16_ = vulkan_->uses_fp16();
    if (GetParam() == VulkanOptions::Precision::kFp16) {
      ASSERT_TRUE(fp16_);
    }
  }
  void TearDown() override {
    if (vulkan_ != nullptr) {
      EXPECT_EQ(vulkan_->validation_errors(), 0) << vulkan_->last_validation_error();
    }
  }

  // The same inputs on both backends: weights through Weight, activations through WriteFloats.
  struct Pair {
    std::unique_ptr<Buffer> gpu, cpu;
  };
  Pair Weights(const std::vector<float>& values) {
    Pair pair;
    pair.gpu = *vulkan_->Weight(values.data(), static_cast<int64_t>(values.size()));
    pair.cpu = *cpu_->Weight(values.data(), static_cast<int64_t>(values.size()));
    return pair;
  }
  Pair Floats(const std::vector<float>& values) {
    Pair pair;
    pair.gpu = *vulkan_->Floats(static_cast<int64_t>(values.size()));
    pair.cpu = *cpu_->Floats(static_cast<int64_t>(values.size()));
    EXPECT_TRUE(vulkan_->WriteFloats(*pair.gpu, values.data(), values.size()).ok());
    EXPECT_TRUE(cpu_->WriteFloats(*pair.cpu, values.data(), values.size()).ok());
    return pair;
  }
  Pair Ints(const std::vector<int32_t>& values) {
    Pair pair;
    pair.gpu = *vulkan_->Ints(static_cast<int64_t>(values.size()));
    pair.cpu = *cpu_->Ints(static_cast<int64_t>(values.size()));
    EXPECT_TRUE(vulkan_->WriteInts(*pair.gpu, values.data(), values.size()).ok());
    EXPECT_TRUE(cpu_->WriteInts(*pair.cpu, values.data(), values.size()).ok());
    return pair;
  }
  Pair Outputs(int64_t count) { return {*vulkan_->Floats(count), *cpu_->Floats(count)}; }
  Pair MatmulInputs(int64_t count) {
    return {*vulkan_->MatmulInput(count), *cpu_->MatmulInput(count)};
  }
  // Whether MatmulInput buffers are fp16 here: wherever fp16 is on and the tiled matmul runs
  // (it then has an fp16-x pipeline); with cooperative matrices, where an fp16-x block is built.
  bool HalfInputs() const {
    return vulkan_->Describe().find("matmul inputs fp16") != std::string::npos;
  }
  // The fp32 values of a reference (CPU) buffer.
  std::vector<float> Read(Buffer& cpu, int64_t count) {
    std::vector<float> values(static_cast<size_t>(count));
    EXPECT_TRUE(cpu_->ReadFloats(cpu, values.data(), count).ok());
    return values;
  }
  // Reads both outputs and checks |gpu − cpu| ≤ tolerance(i) element by element.
  void ExpectWithin(const char* what, Pair& out, int64_t count,
                    const std::function<double(size_t, double)>& tolerance) {
    std::vector<float> gpu(static_cast<size_t>(count)), cpu(static_cast<size_t>(count));
    ASSERT_TRUE(vulkan_->ReadFloats(*out.gpu, gpu.data(), count).ok());
    ASSERT_TRUE(cpu_->ReadFloats(*out.cpu, cpu.data(), count).ok());
    size_t worst = 0;
    double worst_excess = -1e300;
    for (size_t i = 0; i < gpu.size(); ++i) {
      ASSERT_TRUE(std::isfinite(gpu[i])) << what << "[" << i << "] is " << gpu[i];
      const double excess = std::fabs(gpu[i] - cpu[i]) - tolerance(i, cpu[i]);
      if (excess > worst_excess) {
        worst_excess = excess;
        worst = i;
      }
    }
    EXPECT_LE(worst_excess, 0.0) << what << "[" << worst << "]: vulkan " << gpu[worst] << ", cpu "
                                 << cpu[worst] << ", tolerance " << tolerance(worst, cpu[worst]);
  }

  // Linear on both backends with random x, w and b, the output poisoned first, within the
  // matmul's bound (the top of the file).
  void ExpectLinearsWithin(const std::vector<LinearShape>& shapes);

  // Replaces the Vulkan backend by one with matvec.comp in `layout`, after checking the one it
  // replaces ran without validation errors. Buffers of the old one must be gone.
  void UseMatvecLayout(VulkanOptions::MatvecLayout layout) {
    EXPECT_EQ(vulkan_->validation_errors(), 0) << vulkan_->last_validation_error();
    vulkan_.reset();
    vulkan_ = testing::ValidatedVulkan(GetParam(), layout);
    ASSERT_NE(vulkan_, nullptr);
    EXPECT_TRUE(absl::StrContains(vulkan_->Describe(),
                                  absl::StrCat("decoding's matvec ", MatvecLayoutName(layout))))
        << vulkan_->Describe();
  }

  std::unique_ptr<VulkanBackend> vulkan_;
  std::unique_ptr<Backend> cpu_;
  bool fp16_ = false;
};

constexpr VulkanOptions::MatvecLayout kMatvecLayouts[] = {
    VulkanOptions::MatvecLayout::kNarrow, VulkanOptions::MatvecLayout::kWide,
    VulkanOptions::MatvecLayout::kWide2, VulkanOptions::MatvecLayout::kWide4};

TEST_P(EdgeKernelsTest, LinearMatchesTheReferenceAtTileAndRaggedShapes) {
  // Against the matmul shaders' 128×128 output blocks, 16-deep K slices and vector loads: whole
  // blocks, M/N/K ragged (K a multiple of 4 and not: vector and scalar loads), tiny shapes.
  // matvec.comp (up to 4 rows): K past its 64 lanes and ragged, more columns than one dispatch
  // dimension holds on lavapipe (65,535), and 5 rows back on the tiled path.
  ExpectLinearsWithin({{77, 45, 70, true},
                       {130, 256, 129, false},
                       {64, 64, 64, true},
                       {1, 300, 17, true},
                       {1, 1, 1, true},
                       {3, 7, 5, false},
                       {256, 48, 256, true},
                       {129, 36, 257, false},
                       {200, 520, 131, true},
                       {33, 2, 300, false},
                       {4, 1030, 33, true},
                       {2, 3, 70001, true},
                       {5, 64, 70, true}});
}

TEST_P(EdgeKernelsTest, MatvecMatchesTheReferenceInEachLayout) {
  // matvec.comp's vector path (K a multiple of 8): whole rounds of four reads a lane, a
  // remainder after them, fewer vectors than lanes, a column count past one dispatch dimension;
  // then its element path (K ragged). Each in every layout, outputs poisoned first.
  for (const VulkanOptions::MatvecLayout layout : kMatvecLayouts) {
    SCOPED_TRACE(MatvecLayoutName(layout));
    UseMatvecLayout(layout);
    ExpectLinearsWithin({{4, 1024, 33, true},
                         {1, 2048, 300, false},
                         {3, 1032, 65, true},
                         {2, 8, 70001, true},
                         {4, 24, 5, false},
                         {3, 1030, 33, true},
                         {1, 5, 9, false}});
  }
}

// Several columns a subgroup read x once for all of them, but add each column's products in the
// wide layout's order: the wide layout's bits, in every column (N odd, columns past the last
// whole workgroup of 4·C, the vector path with a remainder and the element path).
TEST_P(EdgeKernelsTest, SubgroupColumnsGiveTheWideLayoutsBits) {
  const std::vector<LinearShape> shapes = {
      {1, 2048, 300, true}, {4, 1032, 65, false}, {3, 1030, 33, true}, {2, 8, 70001, true}};
  auto run = [&](const LinearShape& s) {
    Pair x = Floats(RandomValues(s.rows * s.in, 1.0f, 61));
    Pair w = Weights(RandomValues(s.out * s.in, 1.0f, 62)),
         b = Weights(RandomValues(s.out, 1.0f, 63));
    Pair out = Outputs(s.rows * s.out);
    const absl::Status linear = vulkan_->Linear(*x.gpu, *w.gpu, s.bias ? b.gpu.get() : nullptr,
                                                s.rows, s.in, s.out, *out.gpu);
    EXPECT_TRUE(linear.ok()) << linear;
    std::vector<float> got(static_cast<size_t>(s.rows * s.out), std::nanf(""));
    EXPECT_TRUE(vulkan_->ReadFloats(*out.gpu, got.data(), s.rows * s.out).ok());
    return got;
  };
  testing::ExpectSubgroupColumnsGiveTheWideBits(
      shapes, [&](VulkanOptions::MatvecLayout layout) { UseMatvecLayout(layout); }, run);
}

// A buffer destroyed while a recorded command still reads it: the command runs on its values,
// since the context frees its memory only after the next wait (VulkanContext::Release), and the
// validation layer sees no destroyed buffer in a submitted command. New buffers written before
// that wait must not take its memory. Destroying it at once corrupted lavapipe's heap
// (edge_bench's matvec timings aborted in glibc's free).
TEST_P(EdgeKernelsTest, ABufferDestroyedWithPendingWorkLivesUntilTheWait) {
  const int64_t count = 4096;
  const std::vector<float> a = RandomValues(count, 1.0f, 71), b = RandomValues(count, 1.0f, 72);
  std::unique_ptr<Buffer> out = *vulkan_->Floats(count);
  {
    std::unique_ptr<Buffer> x = *vulkan_->Floats(count), y = *vulkan_->Floats(count);
    ASSERT_TRUE(vulkan_->WriteFloats(*x, a.data(), count).ok());
    ASSERT_TRUE(vulkan_->WriteFloats(*y, b.data(), count).ok());
    ASSERT_TRUE(vulkan_->Add(*x, *y, count, *out).ok());  // recorded, not yet submitted
  }
  std::vector<std::unique_ptr<Buffer>> others;
  const std::vector<float> other(static_cast<size_t>(count), 1e6f);
  for (int i = 0; i < 4; ++i) {
    others.push_back(*vulkan_->Floats(count));
    ASSERT_TRUE(vulkan_->WriteFloats(*others.back(), other.data(), count).ok());
  }
  std::vector<float> got(static_cast<size_t>(count));
  ASSERT_TRUE(vulkan_->ReadFloats(*out, got.data(), count).ok());
  for (int64_t i = 0; i < count; ++i) ASSERT_EQ(got[i], a[i] + b[i]) << "out[" << i << "]";
}

// LinearAdd folds the residual add into matvec.comp: for the same inputs its out is, bit for
// bit, Linear's result added to out's old values by Add (the product rounded to fp32 first, then
// one fp32 add in the same order), in each layout, with and without a bias. More rows than
// matvec.comp's, and the CPU backend, are refused with the reason.
TEST_P(EdgeKernelsTest, LinearAddIsLinearThenAddBitForBit) {
  for (const VulkanOptions::MatvecLayout layout : kMatvecLayouts) {
    SCOPED_TRACE(MatvecLayoutName(layout));
    UseMatvecLayout(layout);
    for (const LinearShape& s : std::vector<LinearShape>{
             {1, 2048, 300, true}, {4, 1032, 65, false}, {3, 24, 5, true}, {2, 33, 70, true}}) {
      SCOPED_TRACE(::testing::Message() << s.rows << "x" << s.in << " · " << s.out);
      ASSERT_TRUE(vulkan_->FusesIntoLinear(s.rows));
      const std::vector<float> x = RandomValues(s.rows * s.in, 1.0f, 11);
      const std::vector<float> w = RandomValues(s.out * s.in, 1.0f, 12);
      const std::vector<float> b = RandomValues(s.out, 1.0f, 13);
      const std::vector<float> residual = RandomValues(s.rows * s.out, 4.0f, 14);
      Pair xs = Floats(x), ws = Weights(w), bs = Weights(b);
      testing::ExpectLinearAddIsLinearThenAdd(*vulkan_, *xs.gpu, *ws.gpu,
                                              s.bias ? bs.gpu.get() : nullptr, s, residual);
    }
  }
  EXPECT_FALSE(vulkan_->FusesIntoLinear(5));
  Pair x = Floats(RandomValues(5 * 8, 1.0f, 15)), w = Weights(RandomValues(8 * 8, 1.0f, 16));
  Pair out = Outputs(5 * 8);
  absl::Status refused = vulkan_->LinearAdd(*x.gpu, *w.gpu, nullptr, 5, 8, 8, *out.gpu);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), "up to 4 rows")) << refused;
  EXPECT_FALSE(cpu_->FusesIntoLinear(1));
  EXPECT_EQ(cpu_->LinearAdd(*x.cpu, *w.cpu, nullptr, 1, 8, 8, *out.cpu).code(),
            absl::StatusCode::kFailedPrecondition);
}

void EdgeKernelsTest::ExpectLinearsWithin(const std::vector<LinearShape>& shapes) {
  for (const LinearShape& s : shapes) {
    SCOPED_TRACE(::testing::Message() << s.rows << "x" << s.in << " · " << s.out << "x" << s.in);
    const std::vector<float> x = RandomValues(s.rows * s.in, 1.0f, 1);
    const std::vector<float> w = RandomValues(s.out * s.in, 1.0f, 2);
    const std::vector<float> b = RandomValues(s.out, 1.0f, 3);
    Pair xs = Floats(x), ws = Weights(w), bs = Weights(b);
    Pair out = Floats(std::vector<float>(static_cast<size_t>(s.rows * s.out), std::nanf("")));
    ASSERT_TRUE(vulkan_
                    ->Linear(*xs.gpu, *ws.gpu, s.bias ? bs.gpu.get() : nullptr, s.rows, s.in, s.out,
                             *out.gpu)
                    .ok());
    ASSERT_TRUE(cpu_->Linear(*xs.cpu, *ws.cpu, s.bias ? bs.cpu.get() : nullptr, s.rows, s.in, s.out,
                             *out.cpu)
                    .ok());
    ExpectWithin("linear", out, s.rows * s.out, [&](size_t i, double) {
      const int64_t r = static_cast<int64_t>(i) / s.out, c = static_cast<int64_t>(i) % s.out;
      double magnitude = 0.0;
      for (int64_t k = 0; k < s.in; ++k) magnitude += std::fabs(x[r * s.in + k] * w[c * s.in + k]);
      double bound = 2.0 * static_cast<double>(s.in) * kU32 * magnitude;
      // The bias add: one more fp32 rounding on each side.
      if (s.bias) bound += 2 * kU32 * (magnitude + std::fabs(b[c]));
      if (fp16_)
        bound += (2 * kU16 + kU16 * kU16) * magnitude + (s.bias ? kU16 * std::fabs(b[c]) : 0);
      return bound + 1e-30;
    });
  }
}

TEST_P(EdgeKernelsTest, RmsNormMatchesTheReference) {
  const int64_t rows = 37, dim = 300;
  const std::vector<float> x = RandomValues(rows * dim, 2.0f, 4);
  std::vector<float> w = RandomValues(dim, 0.2f, 5);
  for (float& value : w) value += 1.0f;
  Pair xs = Floats(x), ws = Weights(w), out = Outputs(rows * dim);
  ASSERT_TRUE(vulkan_->RmsNorm(*xs.gpu, *ws.gpu, rows, dim, 1e-6, *out.gpu).ok());
  ASSERT_TRUE(cpu_->RmsNorm(*xs.cpu, *ws.cpu, rows, dim, 1e-6, *out.cpu).ok());
  ExpectWithin("rmsnorm", out, rows * dim, [&](size_t, double y) {
    return ((dim + 8) * kU32 + (fp16_ ? kU16 : 0.0)) * std::fabs(y) + 1e-30;
  });
}

TEST_P(EdgeKernelsTest, EmbeddingGathersRows) {
  const int64_t vocab = 50, dim = 33, count = 300;
  const std::vector<float> table = RandomValues(vocab * dim, 3.0f, 6);
  std::vector<int32_t> tokens(count);
  for (int64_t t = 0; t < count; ++t) tokens[t] = static_cast<int32_t>((t * 7 + 3) % vocab);
  Pair ts = Weights(table), ids = Ints(tokens), out = Outputs(count * dim);
  ASSERT_TRUE(vulkan_->Embedding(*ts.gpu, *ids.gpu, count, dim, *out.gpu).ok());
  ASSERT_TRUE(cpu_->Embedding(*ts.cpu, *ids.cpu, count, dim, *out.cpu).ok());
  ExpectWithin("embedding", out, count * dim,
               [&](size_t, double y) { return fp16_ ? kU16 * std::fabs(y) : 0.0; });
}

TEST_P(EdgeKernelsTest, AddAndSiluMatchTheReference) {
  const int64_t count = 70001;  // more than one grid-stride pass at 256 per group on small grids
  const std::vector<float> a = RandomValues(count, 4.0f, 7), b = RandomValues(count, 4.0f, 8);
  Pair as = Floats(a), bs = Floats(b), sum = Outputs(count), silu = Outputs(count);
  ASSERT_TRUE(vulkan_->Add(*as.gpu, *bs.gpu, count, *sum.gpu).ok());
  ASSERT_TRUE(cpu_->Add(*as.cpu, *bs.cpu, count, *sum.cpu).ok());
  ASSERT_TRUE(vulkan_->Silu(*as.gpu, count, *silu.gpu).ok());
  ASSERT_TRUE(cpu_->Silu(*as.cpu, count, *silu.cpu).ok());
  ExpectWithin("add", sum, count, [](size_t, double) { return 0.0; });
  ExpectWithin("silu", silu, count, [&](size_t i, double y) {
    return (8 + 2 * std::fabs(a[i])) * 2 * kU32 * std::max(std::fabs(y), std::fabs(double(a[i])));
  });
}

TEST_P(EdgeKernelsTest, AttentionMatchesTheReferenceWithAndWithoutTheCausalMask) {
  struct Shape {
    int64_t batch, seq, heads, head_dim;
  };
  // Several 64-query workgroups and 32-key tiles, ragged ends, head_dim up to the limit and not
  // a multiple of the 4 invocations that share a query.
  for (const Shape& s : {Shape{2, 37, 3, 16}, Shape{1, 130, 2, 64}, Shape{1, 5, 1, 128},
                         Shape{1, 200, 2, 128}, Shape{2, 70, 2, 30}}) {
    for (bool causal : {false, true}) {
      SCOPED_TRACE(::testing::Message()
                   << "batch " << s.batch << " seq " << s.seq << " heads " << s.heads
                   << " head_dim " << s.head_dim << (causal ? " causal" : ""));
      const int64_t dim = s.heads * s.head_dim;
      const std::vector<float> qkv = RandomValues(s.batch * s.seq * 3 * dim, 1.0f, 9);
      Pair in = Floats(qkv), out = Outputs(s.batch * s.seq * dim);
      ASSERT_TRUE(vulkan_->Attention(*in.gpu, s.batch, s.seq, s.heads, dim, causal, *out.gpu).ok());
      ASSERT_TRUE(cpu_->Attention(*in.cpu, s.batch, s.seq, s.heads, dim, causal, *out.cpu).ok());
      const double score_max = std::sqrt(static_cast<double>(s.head_dim));  // |q|,|k| ≤ 1
      ExpectWithin("attention", out, s.batch * s.seq * dim, [&](size_t, double) {
        return (static_cast<double>(s.seq) + 3 + 2 * score_max) * 4 * kU32;  // max|v| ≤ 1
      });
    }
  }
}

TEST_P(EdgeKernelsTest, TokenNllIsLogSoftmaxCrossEntropy) {
  const int64_t rows = 41, vocab = 1000;
  const std::vector<float> logits = RandomValues(rows * vocab, 8.0f, 10);
  std::vector<int32_t> targets(rows);
  for (int64_t r = 0; r < rows; ++r) targets[r] = static_cast<int32_t>((r * 37) % vocab);
  Pair ls = Floats(logits), ts = Ints(targets), out = Outputs(rows);
  ASSERT_TRUE(vulkan_->TokenNll(*ls.gpu, *ts.gpu, rows, vocab, *out.gpu).ok());
  ASSERT_TRUE(cpu_->TokenNll(*ls.cpu, *ts.cpu, rows, vocab, *out.cpu).ok());
  ExpectWithin("nll", out, rows, [&](size_t, double) { return (vocab + 16) * kU32 * (1 + 8.0); });
}

TEST_P(EdgeKernelsTest, UnsupportedShapesAreClearErrors) {
  Pair in = Outputs(3 * 256), out = Outputs(256);
  absl::Status status = vulkan_->Attention(*in.gpu, 1, 1, 1, 256, false, *out.gpu);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("head_dim 256"), std::string::npos) << status;
  EXPECT_NE(status.message().find("limit of 128"), std::string::npos) << status;
}

// The fp16 producers: RmsNorm and Silu write a MatmulInput buffer (fp16 on lavapipe's fp16
// path, fp32 on its fp32 path) that Linear then reads as x, against the reference. x's length
// is a multiple of 4 (the matmul's vector loads of 4 halves) for the norm and not for SiLU
// (scalar loads).
TEST_P(EdgeKernelsTest, RmsNormAndSiluWriteTheMatmulsInputAndLinearReadsIt) {
  if (fp16_ && !vulkan_->uses_cooperative_matrix()) {
    EXPECT_TRUE(HalfInputs()) << vulkan_->Describe();
  }
  if (!fp16_) {
    EXPECT_FALSE(HalfInputs()) << vulkan_->Describe();
  }
  // 37 rows on the matmul, 3 on matvec.comp: K ragged (its element path) and K a multiple of 8
  // (its vector path, which reads an fp16 x in 16-byte vectors), in both of its layouts.
  struct Case {
    int64_t rows, dim, ffn;
  };
  for (const VulkanOptions::MatvecLayout layout : kMatvecLayouts)
    for (const Case& shape : {Case{37, 300, 130}, Case{3, 300, 130}, Case{3, 256, 136}}) {
      if (layout != kMatvecLayouts[0] && shape.rows > 4) continue;  // the matmul: once is enough
      UseMatvecLayout(layout);
      SCOPED_TRACE(::testing::Message()
                   << shape.rows << " rows, dim " << shape.dim << ", ffn " << shape.ffn
                   << ", matvec " << (layout == kMatvecLayouts[0] ? "narrow" : "wide"));
      const int64_t rows = shape.rows, dim = shape.dim, ffn = shape.ffn, out_features = 70;
      const double fp16_rounding = fp16_ ? 2 * kU16 + kU16 * kU16 : 0.0;
      // out = x·wᵀ + b on the reference x, the matmul's bound (see the top of the file) plus each
      // x_k's error bound x_error(k) carried through |w_k|.
      auto linear_tolerance = [&](const std::vector<float>& x, const std::vector<float>& w,
                                  const std::vector<float>* b, int64_t in,
                                  const std::function<double(int64_t)>& x_error) {
        return [&x, &w, b, in, x_error, fp16_rounding, this](size_t i, double) {
          const int64_t r = static_cast<int64_t>(i) / out_features;
          const int64_t c = static_cast<int64_t>(i) % out_features;
          double magnitude = 0.0, carried = 0.0;
          for (int64_t k = 0; k < in; ++k) {
            magnitude += std::fabs(x[r * in + k] * w[c * in + k]);
            carried += x_error(r * in + k) * std::fabs(w[c * in + k]);
          }
          double bound = (2.0 * static_cast<double>(in) * kU32 + fp16_rounding) * magnitude +
                         carried * (1 + 4 * kU16);
          if (fp16_ && b != nullptr) bound += kU16 * std::fabs((*b)[static_cast<size_t>(c)]);
          return bound + 1e-30;
        };
      };

      // RmsNorm → the attention's input projection (with bias).
      const std::vector<float> h = RandomValues(rows * dim, 2.0f, 11);
      std::vector<float> norm_weight = RandomValues(dim, 0.2f, 12);
      for (float& value : norm_weight) value += 1.0f;
      const std::vector<float> w1 = RandomValues(out_features * dim, 1.0f, 13);
      const std::vector<float> b1 = RandomValues(out_features, 1.0f, 14);
      Pair hs = Floats(h), norms = Weights(norm_weight), w1s = Weights(w1), b1s = Weights(b1);
      Pair normed = MatmulInputs(rows * dim), projected = Outputs(rows * out_features);
      ASSERT_TRUE(vulkan_->RmsNorm(*hs.gpu, *norms.gpu, rows, dim, 1e-6, *normed.gpu).ok());
      ASSERT_TRUE(cpu_->RmsNorm(*hs.cpu, *norms.cpu, rows, dim, 1e-6, *normed.cpu).ok());
      absl::Status linear = vulkan_->Linear(*normed.gpu, *w1s.gpu, b1s.gpu.get(), rows, dim,
                                            out_features, *projected.gpu);
      ASSERT_TRUE(linear.ok()) << linear;
      ASSERT_TRUE(cpu_->Linear(*normed.cpu, *w1s.cpu, b1s.cpu.get(), rows, dim, out_features,
                               *projected.cpu)
                      .ok());
      const std::vector<float> normed_x = Read(*normed.cpu, rows * dim);
      ExpectWithin("rmsnorm → linear", projected, rows * out_features,
                   linear_tolerance(normed_x, w1, &b1, dim, [&](int64_t k) {
                     return ((dim + 8) * kU32 + (fp16_ ? kU16 : 0.0)) *
                            std::fabs(normed_x[static_cast<size_t>(k)]);
                   }));

      // Silu → the FFN's down projection (no bias).
      const std::vector<float> hidden = RandomValues(rows * ffn, 4.0f, 15);
      const std::vector<float> w2 = RandomValues(out_features * ffn, 1.0f, 16);
      Pair hiddens = Floats(hidden), w2s = Weights(w2);
      Pair activated = MatmulInputs(rows * ffn), down = Outputs(rows * out_features);
      ASSERT_TRUE(vulkan_->Silu(*hiddens.gpu, rows * ffn, *activated.gpu).ok());
      ASSERT_TRUE(cpu_->Silu(*hiddens.cpu, rows * ffn, *activated.cpu).ok());
      linear =
          vulkan_->Linear(*activated.gpu, *w2s.gpu, nullptr, rows, ffn, out_features, *down.gpu);
      ASSERT_TRUE(linear.ok()) << linear;
      ASSERT_TRUE(
          cpu_->Linear(*activated.cpu, *w2s.cpu, nullptr, rows, ffn, out_features, *down.cpu).ok());
      const std::vector<float> activated_x = Read(*activated.cpu, rows * ffn);
      ExpectWithin("silu → linear", down, rows * out_features,
                   linear_tolerance(activated_x, w2, nullptr, ffn, [&](int64_t k) {
                     const double a = std::fabs(hidden[static_cast<size_t>(k)]);
                     return (8 + 2 * a) * 2 * kU32 *
                            std::max(std::fabs(double(activated_x[static_cast<size_t>(k)])), a);
                   }));

      // The numerics did not move: the tiled fp16 matmul rounds an fp32 x to fp16 as it stages
      // it, so the same norm through an fp32 buffer gives the same bits. (Where cooperative
      // matrices run, the tuner may pick different blocks for the two, summing in another order.)
      if (HalfInputs() && !vulkan_->uses_cooperative_matrix()) {
        Pair normed32 = Outputs(rows * dim), projected32 = Outputs(rows * out_features);
        ASSERT_TRUE(vulkan_->RmsNorm(*hs.gpu, *norms.gpu, rows, dim, 1e-6, *normed32.gpu).ok());
        ASSERT_TRUE(vulkan_
                        ->Linear(*normed32.gpu, *w1s.gpu, b1s.gpu.get(), rows, dim, out_features,
                                 *projected32.gpu)
                        .ok());
        std::vector<float> via_half(static_cast<size_t>(rows * out_features));
        std::vector<float> via_fp32(via_half.size());
        ASSERT_TRUE(vulkan_->ReadFloats(*projected.gpu, via_half.data(), rows * out_features).ok());
        ASSERT_TRUE(
            vulkan_->ReadFloats(*projected32.gpu, via_fp32.data(), rows * out_features).ok());
        EXPECT_EQ(via_half, via_fp32);
      }
    }
}

// An fp16 MatmulInput buffer is only Linear's x and the output of RmsNorm, Silu and Add;
// anything else that would read or write it as fp32 is refused, naming the op.
TEST_P(EdgeKernelsTest, AnFp16MatmulInputWhereFp32IsNeededIsRefused) {
  if (!HalfInputs()) {
    // fp32 (or a device whose matmuls all read fp32 x): MatmulInput is plain fp32.
    EXPECT_TRUE(!fp16_ || vulkan_->uses_cooperative_matrix()) << vulkan_->Describe();
    std::unique_ptr<Buffer> input = *vulkan_->MatmulInput(5);
    const std::vector<float> values = {1.5f, -2.0f, 3.25f, 0.1f, 1e-7f};
    std::vector<float> back(values.size());
    ASSERT_TRUE(vulkan_->WriteFloats(*input, values.data(), 5).ok());
    ASSERT_TRUE(vulkan_->ReadFloats(*input, back.data(), 5).ok());
    EXPECT_EQ(back, values);
    return;
  }
  const int64_t rows = 4, dim = 16, vocab = 16;
  std::unique_ptr<Buffer> half = *vulkan_->MatmulInput(rows * 3 * dim);
  std::unique_ptr<Buffer> floats = *vulkan_->Floats(rows * 3 * dim);
  std::unique_ptr<Buffer> weight =
      *vulkan_->Weight(RandomValues(dim * dim, 1.0f, 17).data(), dim * dim);
  std::unique_ptr<Buffer> ids = *vulkan_->Ints(rows);
  std::vector<float> host(static_cast<size_t>(rows * 3 * dim));
  auto expect_refused = [](const absl::Status& status, const std::string& op) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << op << ": " << status;
    EXPECT_TRUE(absl::StartsWith(status.message(), op + ": ")) << status;
    EXPECT_NE(status.message().find("fp16 matmul input"), std::string::npos) << status;
  };
  expect_refused(vulkan_->ReadFloats(*half, host.data(), rows * dim), "ReadFloats");
  expect_refused(vulkan_->WriteFloats(*half, host.data(), rows * dim), "WriteFloats");
  expect_refused(vulkan_->Attention(*floats, 1, rows, 1, dim, true, *half), "Attention");
  expect_refused(vulkan_->Attention(*half, 1, rows, 1, dim, true, *floats), "Attention");
  expect_refused(vulkan_->Linear(*floats, *weight, nullptr, rows, dim, dim, *half), "Linear");
  expect_refused(vulkan_->Embedding(*weight, *ids, 1, dim, *half), "Embedding");
  expect_refused(vulkan_->RmsNorm(*half, *weight, rows, dim, 1e-6, *floats), "RmsNorm");
  expect_refused(vulkan_->Silu(*half, rows * dim, *floats), "Silu");
  expect_refused(vulkan_->Add(*floats, *half, rows * dim, *floats), "Add");
  expect_refused(vulkan_->TokenNll(*half, *ids, rows, vocab, *floats), "TokenNll");
  expect_refused(vulkan_->TokenNll(*floats, *ids, rows, vocab, *half), "TokenNll");
  // Add may write one (a residual sum read only by a matmul), and Linear reads it.
  ASSERT_TRUE(vulkan_->Add(*floats, *floats, rows * dim, *half).ok());
  EXPECT_TRUE(vulkan_->Linear(*half, *weight, nullptr, rows, dim, dim, *floats).ok());
  EXPECT_TRUE(vulkan_->Finish().ok());
}

// Every block shape built is listed and accepted by name (on a device without cooperative
// matrices the tiled shader then runs); a name that was not built is refused with the list.
TEST(EdgeCoopBlockTest, BlocksAreChosenByNameAndAnUnknownNameIsRefused) {
  const std::vector<CoopMatmulVariant>& variants = CoopMatmulVariants();
  ASSERT_GE(variants.size(), 2u);
  EXPECT_EQ(variants.front().shader, Shader::kMatmulCoop);  // the default comes first
  for (const CoopMatmulVariant& variant : variants) {
    SCOPED_TRACE(variant.block);
    const OutputBlock block = VariantOf(variant.shader).block;
    EXPECT_TRUE(absl::StartsWith(variant.block, absl::StrCat(block.rows, "x", block.cols, "k")));
    EXPECT_GT(VariantOf(variant.shader).code.bytes, 0u);
    VulkanOptions options;
    options.coop_block = variant.block;
    options.validation = true;
    absl::StatusOr<std::unique_ptr<VulkanBackend>> backend = CreateVulkanBackend(options);
    ASSERT_TRUE(backend.ok()) << backend.status();
    EXPECT_EQ((*backend)->validation_errors(), 0) << (*backend)->last_validation_error();
  }
  VulkanOptions options;
  options.coop_block = "64x64k16";
  absl::StatusOr<std::unique_ptr<VulkanBackend>> refused = CreateVulkanBackend(options);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("'64x64k16' is not built; the blocks are 128x128k32"),
            std::string::npos)
      << refused.status();
}

// An attention shader pinned by name must exist on the device: lavapipe has no cooperative
// matrices, so every name, including the subgroup shader's, is refused with the reason, and
// the workgroup-scope ones are listed with names where the build has them.
TEST(EdgeAttentionChoiceTest, ANameTheDeviceCannotRunIsRefused) {
  for (const AttentionVariant& variant : AttentionCm2Shaders()) {
    EXPECT_GT(VariantOf(variant.shader).code.bytes, 0u) << variant.name;
    EXPECT_GE(VariantOf(variant.shader).block.cols, 64) << variant.name;  // largest head_dim
  }
  for (const std::string name : {"subgroup", "cm2", "flash"}) {
    VulkanOptions options;
    options.attention = name;
    absl::StatusOr<std::unique_ptr<VulkanBackend>> refused = CreateVulkanBackend(options);
    ASSERT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_EQ(refused.status().message(),
              absl::StrCat("attention shader '", name,
                           "' is not available on this device (attention runs on the vector "
                           "units here)"));
  }
  VulkanOptions tuned;  // no name: whatever the device has
  EXPECT_TRUE(CreateVulkanBackend(tuned).ok());
}

// Pipeline statistics are the driver's: asked of a device without
// VK_KHR_pipeline_executable_properties (lavapipe here), or not asked, one line says why; where
// the driver keeps them, one line per matmul pipeline, named.
TEST(EdgePipelineStatisticsTest, OneLineSayingWhyOrOnePerMatmul) {
  for (const bool asked : {false, true}) {
    VulkanOptions options;
    options.validation = true;
    options.pipeline_statistics = asked;
    absl::StatusOr<std::unique_ptr<VulkanBackend>> backend = CreateVulkanBackend(options);
    ASSERT_TRUE(backend.ok()) << backend.status();
    const std::vector<std::string> lines = (*backend)->pipeline_statistics();
    ASSERT_FALSE(lines.empty());
    if (lines.front().find("keeps no pipeline statistics") != std::string::npos) {
      EXPECT_EQ(lines.size(), 1u);
      EXPECT_TRUE(absl::StrContains(lines.front(), "VK_KHR_pipeline_executable_properties"))
          << lines.front();
    } else {
      EXPECT_TRUE(asked) << "statistics kept without being asked for: " << lines.front();
      EXPECT_TRUE(absl::StrContains(lines.front(), ": ")) << lines.front();
    }
    EXPECT_EQ((*backend)->validation_errors(), 0) << (*backend)->last_validation_error();
  }
}

// --precision fp32 on a device that has fp16: MatmulInput is fp32, which every op takes.
TEST(EdgeMatmulInputTest, Fp32PrecisionKeepsMatmulInputsFp32) {
  std::unique_ptr<VulkanBackend> vulkan = testing::ValidatedVulkan(VulkanOptions::Precision::kFp32);
  ASSERT_NE(vulkan, nullptr);
  EXPECT_FALSE(vulkan->uses_fp16());
  EXPECT_EQ(vulkan->Describe().find("matmul inputs fp16"), std::string::npos) << vulkan->Describe();
  std::unique_ptr<Buffer> input = *vulkan->MatmulInput(6);
  const std::vector<float> values = {1.0f, -0.5f, 3.0f, 1e-7f, 65504.0f, 70000.0f};
  std::vector<float> back(values.size());
  ASSERT_TRUE(vulkan->WriteFloats(*input, values.data(), 6).ok());
  absl::Status read = vulkan->ReadFloats(*input, back.data(), 6);
  ASSERT_TRUE(read.ok()) << read;
  EXPECT_EQ(back, values);  // fp32: 1e-7 and 70000 are not fp16 values
  EXPECT_EQ(vulkan->validation_errors(), 0) << vulkan->last_validation_error();
}

// The default (VulkanOptions::MatmulInputs::kAuto) keeps fp32 activations on the tiled path,
// where the fp16-x build measured slower; kFp32 keeps them fp32 everywhere. lavapipe has fp16
// and no cooperative matrices: the tiled path.
TEST(EdgeMatmulInputTest, TheTiledPathKeepsFp32InputsUnlessAsked) {
  for (auto inputs : {VulkanOptions::MatmulInputs::kAuto, VulkanOptions::MatmulInputs::kFp32}) {
    VulkanOptions options;
    options.validation = true;
    options.precision = VulkanOptions::Precision::kFp16;
    options.matmul_inputs = inputs;
    absl::StatusOr<std::unique_ptr<VulkanBackend>> vulkan = CreateVulkanBackend(options);
    ASSERT_TRUE(vulkan.ok()) << vulkan.status();
    if (!(*vulkan)->uses_fp16() || (*vulkan)->uses_cooperative_matrix()) {
      GTEST_SKIP() << "not the tiled fp16 path: " << (*vulkan)->Describe();
    }
    EXPECT_EQ((*vulkan)->Describe().find("matmul inputs fp16"), std::string::npos)
        << (*vulkan)->Describe();
    std::unique_ptr<Buffer> input = *(*vulkan)->MatmulInput(3);
    const std::vector<float> values = {1.0f, 1e-7f, 70000.0f};
    std::vector<float> back(values.size());
    ASSERT_TRUE((*vulkan)->WriteFloats(*input, values.data(), 3).ok());
    ASSERT_TRUE((*vulkan)->ReadFloats(*input, back.data(), 3).ok());
    EXPECT_EQ(back, values);
  }
}

INSTANTIATE_TEST_SUITE_P(Precisions, EdgeKernelsTest,
                         ::testing::Values(VulkanOptions::Precision::kFp32,
                                           VulkanOptions::Precision::kFp16),
                         [](const auto& info) {
                           return info.param == VulkanOptions::Precision::kFp32 ? "fp32" : "fp16";
                         });

}  // namespace
}  // namespace fsdpd::edge
