// Decoding with a cache of qkv rows (ModelRunner::Prefill and Append, Backend::CausalAttentionAt
// and CopyFloats): the attention of new positions against cached ones on Vulkan (lavapipe,
// validation on) against the CPU reference, the CPU reference against the training kernels'
// attention, and a model's cached logits against its whole-window forward.
//
// Tolerances:
//  - CPU CausalAttentionRows from position 0 is AttentionForward's causal output: the same
//    calls on the same matrices, so bit for bit. For later positions the score matrix has fewer
//    rows, and the GEMM blocks rows differently (its remainder rows take another path), so the
//    sums may round differently: within attention's bound below, keys = seq.
//  - Vulkan CausalAttentionAt against the CPU: attention.comp, whose bound edge_kernels_test
//    states: |Δ| ≤ (keys + 3 + 2·s_max)·4·u32·max|v|, keys = first + rows.
//  - A model's logits decoded through the cache against its forward over the same window: the
//    same kernels on the same rows except attention's (a cached position's row is computed from
//    the cache, with another workgroup layout on Vulkan) and the matmul's row count. fp32: the
//    fp32 bound of edge_model_test, 1e-4 of the largest |logit|; CPU: the same, though it is
//    exact in practice. fp16 (lavapipe's fp16 path): the matmuls round their inputs to fp16 on
//    both sides in the same way, so only the fp32 differences remain; 1e-3 of the largest
//    |logit| leaves room for an fp16 rounding that falls the other way.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "edge/cpu_backend.h"
#include "edge/eval.h"
#include "edge/model.h"
#include "kernels/cpu/attention.h"
#include "tests/edge/edge_test_support.h"
#include "tests/support/temp_dir.h"

namespace fsdpd::edge {
namespace {

using testing::kU32;
using testing::RandomValues;

std::vector<float> ReadAll(Backend& backend, Buffer& buffer, int64_t count) {
  std::vector<float> values(static_cast<size_t>(count));
  EXPECT_TRUE(backend.ReadFloats(buffer, values.data(), count).ok());
  return values;
}

std::unique_ptr<Buffer> Upload(Backend& backend, const std::vector<float>& values) {
  std::unique_ptr<Buffer> buffer = *backend.Floats(static_cast<int64_t>(values.size()));
  EXPECT_TRUE(backend.WriteFloats(*buffer, values.data(), values.size()).ok());
  return buffer;
}

// A random model of `config` written as an export in `directory` and read back.
HostModel RandomHostModel(const fsdpd::testing::TempDir& directory, const std::string& name,
                          const ExportedModelConfig& config, uint64_t seed) {
  const std::string path = directory.path() + "/" + name + ".safetensors";
  testing::WriteModel(path, config, testing::RandomModelTensors(config, seed));
  absl::StatusOr<HostModel> model = LoadHostModel(path);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? std::move(*model) : HostModel{};
}

TEST(EdgeDecodingTest, TheCpuRowsAreTheTrainingKernelsCausalAttention) {
  const int64_t seq = 45, heads = 3, head_dim = 16, dim = heads * head_dim;
  const std::vector<float> qkv = RandomValues(seq * 3 * dim, 1.0f, 21);
  std::vector<float> full(seq * dim), lse(heads * seq);
  cpu::AttentionForward(qkv.data(), {1, seq, heads, dim}, /*causal=*/true, full.data(), lse.data());
  const double tolerance = (seq + 3 + 2 * std::sqrt(double(head_dim))) * 4 * kU32;
  auto expect_rows = [&](const std::vector<float>& out, int64_t first) {
    double worst = 0.0;
    for (size_t i = 0; i < out.size(); ++i) {
      ASSERT_TRUE(std::isfinite(out[i])) << "out[" << i << "] is " << out[i];
      worst = std::max(worst, std::fabs(double(out[i]) - full[first * dim + i]));
    }
    EXPECT_LE(worst, tolerance);
  };
  for (int64_t first : {0, 1, 20, 44}) {
    SCOPED_TRACE(::testing::Message() << "first " << first);
    const int64_t rows = seq - first;
    // Poisoned: every element must be written.
    std::vector<float> out(rows * dim, std::nanf(""));
    cpu::CausalAttentionRows(qkv.data(), heads, dim, first, rows, out.data());
    expect_rows(out, first);
    if (first == 0) {
      EXPECT_EQ(0, std::memcmp(out.data(), full.data(), out.size() * sizeof(float)));
    }
  }
  // Rows past first + rows need not exist: a cache filled up to the newest position.
  const int64_t first = 9;
  std::vector<float> prefix(qkv.begin(), qkv.begin() + (first + 1) * 3 * dim);
  std::vector<float> out(dim, std::nanf(""));
  cpu::CausalAttentionRows(prefix.data(), heads, dim, first, 1, out.data());
  expect_rows(out, first);
}

class EdgeDecodingVulkanTest : public ::testing::TestWithParam<VulkanOptions::Precision> {
 protected:
  void SetUp() override {
    vulkan_ = testing::ValidatedVulkan(GetParam());
    ASSERT_NE(vulkan_, nullptr);
    cpu_ = CreateCpuBackend();
  }
  void TearDown() override {
    if (vulkan_ != nullptr) {
      EXPECT_EQ(vulkan_->validation_errors(), 0) << vulkan_->last_validation_error();
    }
  }
  std::unique_ptr<VulkanBackend> vulkan_;
  std::unique_ptr<Backend> cpu_;
};

TEST_P(EdgeDecodingVulkanTest, CausalAttentionAtMatchesTheReference) {
  struct Shape {
    int64_t first, rows, heads, head_dim;
  };
  // One new position and several; cached prefixes inside one 32-key tile and across many, more
  // than a 64-query workgroup of new rows, head_dim up to the shader's limit and ragged. Up to 4
  // rows run attention_decode.comp: its 64-key slices exactly filled (64, 1,024 keys), crossed by
  // one key, rows whose last slices differ (some empty for the earlier rows: 63 + 4 rows), and
  // many slices; 5 rows and more run attention.comp.
  for (const Shape& s :
       {Shape{0, 1, 2, 16}, Shape{5, 1, 4, 32}, Shape{31, 1, 1, 128}, Shape{100, 1, 3, 30},
        Shape{40, 70, 2, 64}, Shape{7, 9, 2, 128}, Shape{0, 4, 3, 128}, Shape{3, 5, 2, 32},
        Shape{63, 1, 2, 64}, Shape{64, 1, 2, 64}, Shape{63, 4, 3, 48}, Shape{1023, 1, 2, 128},
        Shape{1023, 2, 2, 20}, Shape{1500, 1, 2, 128}, Shape{2047, 3, 1, 64}}) {
    SCOPED_TRACE(::testing::Message() << "first " << s.first << " rows " << s.rows << " heads "
                                      << s.heads << " head_dim " << s.head_dim);
    const int64_t dim = s.heads * s.head_dim;
    const int64_t keys = s.first + s.rows;
    const std::vector<float> qkv = RandomValues(keys * 3 * dim, 1.0f, 22);
    std::unique_ptr<Buffer> gpu_qkv = Upload(*vulkan_, qkv), cpu_qkv = Upload(*cpu_, qkv);
    // Poisoned outputs: NaN where the shader failed to write.
    const std::vector<float> poison(s.rows * dim, std::nanf(""));
    std::unique_ptr<Buffer> gpu_out = Upload(*vulkan_, poison), cpu_out = Upload(*cpu_, poison);
    ASSERT_TRUE(vulkan_->CausalAttentionAt(*gpu_qkv, s.first, s.rows, s.heads, dim, *gpu_out).ok());
    ASSERT_TRUE(cpu_->CausalAttentionAt(*cpu_qkv, s.first, s.rows, s.heads, dim, *cpu_out).ok());
    const std::vector<float> gpu = ReadAll(*vulkan_, *gpu_out, s.rows * dim);
    const std::vector<float> cpu = ReadAll(*cpu_, *cpu_out, s.rows * dim);
    const double score_max = std::sqrt(static_cast<double>(s.head_dim));  // |q|,|k| ≤ 1
    const double tolerance = (static_cast<double>(keys) + 3 + 2 * score_max) * 4 * kU32;
    double worst = 0.0;
    for (size_t i = 0; i < gpu.size(); ++i) {
      ASSERT_TRUE(std::isfinite(gpu[i])) << "out[" << i << "] is " << gpu[i];
      worst = std::max(worst, std::fabs(double(gpu[i]) - cpu[i]));
    }
    EXPECT_LE(worst, tolerance);
  }
  // A head wider than attention.comp's is refused, naming the limit.
  std::unique_ptr<Buffer> qkv = *vulkan_->Floats(2 * 3 * 256), out = *vulkan_->Floats(256);
  const absl::Status wide = vulkan_->CausalAttentionAt(*qkv, 1, 1, 1, 256, *out);
  EXPECT_EQ(wide.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(wide.message().find("head_dim 256"), std::string::npos) << wide;
  EXPECT_NE(wide.message().find("limit of 128"), std::string::npos) << wide;
}

// VulkanOptions::combine_in_attention: the last workgroup of a (row, head) adds the slices in
// the dispatch that computes them, in the order attention_decode_combine.comp adds them, so the
// outputs are its bits. Each shape runs twice on the same backend: a count of arrivals left
// nonzero by one dispatch would leave the next one's outputs unwritten (poisoned).
TEST_P(EdgeDecodingVulkanTest, CombiningTheSlicesInPlaceGivesTheSeparateCombinesBits) {
  VulkanOptions options;
  options.validation = true;
  options.precision = GetParam();
  options.combine_in_attention = false;
  std::unique_ptr<VulkanBackend> apart = testing::VulkanWith(options);
  ASSERT_NE(apart, nullptr);
  struct Shape {
    int64_t first, rows, heads, head_dim;
  };
  for (const Shape& s : {Shape{0, 1, 2, 16}, Shape{63, 4, 3, 48}, Shape{64, 1, 2, 64},
                         Shape{1023, 2, 2, 20}, Shape{2047, 3, 5, 64}, Shape{200, 1, 16, 128}}) {
    SCOPED_TRACE(::testing::Message() << "first " << s.first << " rows " << s.rows << " heads "
                                      << s.heads << " head_dim " << s.head_dim);
    const int64_t dim = s.heads * s.head_dim;
    const std::vector<float> qkv = RandomValues((s.first + s.rows) * 3 * dim, 1.0f, 23);
    const std::vector<float> poison(s.rows * dim, std::nanf(""));
    std::unique_ptr<Buffer> apart_qkv = Upload(*apart, qkv), apart_out = Upload(*apart, poison);
    ASSERT_TRUE(
        apart->CausalAttentionAt(*apart_qkv, s.first, s.rows, s.heads, dim, *apart_out).ok());
    const std::vector<float> expected = ReadAll(*apart, *apart_out, s.rows * dim);
    std::unique_ptr<Buffer> in_place_qkv = Upload(*vulkan_, qkv);
    for (int run = 0; run < 2; ++run) {
      std::unique_ptr<Buffer> out = Upload(*vulkan_, poison);
      ASSERT_TRUE(
          vulkan_->CausalAttentionAt(*in_place_qkv, s.first, s.rows, s.heads, dim, *out).ok());
      const std::vector<float> got = ReadAll(*vulkan_, *out, s.rows * dim);
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_TRUE(std::isfinite(expected[i])) << "out[" << i << "]";
        ASSERT_EQ(got[i], expected[i]) << "run " << run << ", out[" << i << "]";
      }
    }
  }
  EXPECT_EQ(apart->validation_errors(), 0) << apart->last_validation_error();
}

TEST_P(EdgeDecodingVulkanTest, CopyFloatsMovesARangeInOrderWithTheOtherOps) {
  const std::vector<float> a = RandomValues(64, 1.0f, 23), b = RandomValues(64, 1.0f, 24);
  for (Backend* backend : {static_cast<Backend*>(vulkan_.get()), cpu_.get()}) {
    SCOPED_TRACE(backend->Describe());
    std::unique_ptr<Buffer> x = Upload(*backend, a), y = Upload(*backend, b);
    std::unique_ptr<Buffer> sum = *backend->Floats(64);
    std::unique_ptr<Buffer> target = Upload(*backend, std::vector<float>(100, -1.0f));
    // The copy reads what Add wrote before it, and the Add after it reads what it wrote.
    ASSERT_TRUE(backend->Add(*x, *y, 64, *sum).ok());
    ASSERT_TRUE(backend->CopyFloats(*sum, 10, *target, 30, 20).ok());
    ASSERT_TRUE(backend->Add(*target, *target, 64, *y).ok());
    ASSERT_TRUE(backend->Finish().ok());
    const std::vector<float> copied = ReadAll(*backend, *target, 100);
    const std::vector<float> doubled = ReadAll(*backend, *y, 64);
    for (int64_t i = 0; i < 100; ++i) {
      const float expected = i >= 30 && i < 50 ? a[i - 20] + b[i - 20] : -1.0f;
      ASSERT_EQ(copied[i], expected) << "target[" << i << "]";
      if (i < 64) {
        ASSERT_EQ(doubled[i], expected + expected) << "y[" << i << "]";
      }
    }
  }
  // A range past either end, or negative, is refused by both backends and writes nothing; so
  // is a count whose size in bytes would wrap to a small one (2^62 + 1 floats: 4 bytes).
  for (Backend* backend : {static_cast<Backend*>(vulkan_.get()), cpu_.get()}) {
    SCOPED_TRACE(backend->Describe());
    std::unique_ptr<Buffer> small = Upload(*backend, std::vector<float>(8, 2.0f));
    std::unique_ptr<Buffer> large = Upload(*backend, std::vector<float>(16, -1.0f));
    struct Range {
      int64_t from, to, count;
    };
    for (const Range r : std::vector<Range>{{4, 0, 5},
                                            {0, 12, 5},
                                            {-1, 0, 2},
                                            {0, -1, 2},
                                            {0, 0, -1},
                                            {0, 0, INT64_MAX},
                                            {0, 0, (int64_t{1} << 62) + 1}}) {
      SCOPED_TRACE(::testing::Message() << r.from << " → " << r.to << " × " << r.count);
      const absl::Status status = backend->CopyFloats(*small, r.from, *large, r.to, r.count);
      EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
      EXPECT_NE(status.message().find("outside the buffers"), std::string::npos) << status;
    }
    ASSERT_TRUE(backend->CopyFloats(*small, 0, *large, 8, 8).ok());  // up to the end: fine
    ASSERT_TRUE(backend->Finish().ok());
    const std::vector<float> copied = ReadAll(*backend, *large, 16);
    for (int64_t i = 0; i < 16; ++i) ASSERT_EQ(copied[i], i < 8 ? -1.0f : 2.0f) << i;
  }
}

// A random causal model: the cached logits of every position against the whole-window forward.
TEST_P(EdgeDecodingVulkanTest, CachedLogitsAreTheForwardsOnEveryBackend) {
  ExportedModelConfig config{97, 64, 3, 4, 2, /*causal=*/true, /*final_norm=*/true, 1e-5};
  fsdpd::testing::TempDir directory("edge-decoding");
  const HostModel model = RandomHostModel(directory, "model", config, 25);
  ASSERT_FALSE(model.tensors.empty());
  const int64_t seq = 24;
  std::vector<int32_t> tokens(seq);
  for (int64_t t = 0; t < seq; ++t) tokens[t] = static_cast<int32_t>((t * 41 + 7) % config.vocab);
  const bool fp16 = vulkan_->uses_fp16();
  for (Backend* backend : {static_cast<Backend*>(vulkan_.get()), cpu_.get()}) {
    SCOPED_TRACE(backend->Describe());
    absl::StatusOr<std::unique_ptr<ModelRunner>> runner =
        ModelRunner::Create(model, backend, 1, seq);
    ASSERT_TRUE(runner.ok()) << runner.status();
    std::vector<float> forward;
    ASSERT_TRUE((*runner)->Logits(tokens, &forward).ok());
    double largest = 0.0;
    for (float value : forward) largest = std::max(largest, std::fabs(double(value)));
    const double tolerance = (backend == cpu_.get() || !fp16 ? 1e-4 : 1e-3) * largest;
    // A prompt of 5, then one position at a time up to the window's end.
    const int64_t prompt = 5;
    std::vector<float> logits;
    ASSERT_TRUE(
        (*runner)
            ->Prefill(std::vector<int32_t>(tokens.begin(), tokens.begin() + prompt), &logits)
            .ok());
    for (int64_t position = prompt - 1; position < seq; ++position) {
      SCOPED_TRACE(::testing::Message() << "position " << position);
      if (position >= prompt) {
        ASSERT_TRUE((*runner)->Append(tokens[position], &logits).ok());
      }
      ASSERT_EQ(logits.size(), static_cast<size_t>(config.vocab));
      EXPECT_EQ((*runner)->cached(), position + 1);
      double worst = 0.0;
      for (int64_t v = 0; v < config.vocab; ++v) {
        worst =
            std::max(worst, std::fabs(double(logits[v]) - forward[position * config.vocab + v]));
      }
      EXPECT_LE(worst, tolerance);
    }
    // The window is full: one more position is refused until a new prefill.
    absl::Status full = (*runner)->Append(tokens[0], &logits);
    EXPECT_EQ(full.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(full.message().find("prefill a window"), std::string::npos) << full;
  }
}

// The whole window's logits, then a prompt of 4's and each position's after it through the
// cache, in one vector.
std::vector<float> EveryLogit(const HostModel& model, Backend& backend,
                              const std::vector<int32_t>& tokens) {
  const auto seq = static_cast<int64_t>(tokens.size());
  absl::StatusOr<std::unique_ptr<ModelRunner>> runner =
      ModelRunner::Create(model, &backend, 1, seq);
  EXPECT_TRUE(runner.ok()) << runner.status();
  if (!runner.ok()) return {};
  std::vector<float> all, logits;
  EXPECT_TRUE((*runner)->Logits(tokens, &all).ok());
  EXPECT_TRUE(
      (*runner)->Prefill(std::vector<int32_t>(tokens.begin(), tokens.begin() + 4), &logits).ok());
  all.insert(all.end(), logits.begin(), logits.end());
  for (int64_t position = 4; position < seq; ++position) {
    EXPECT_TRUE((*runner)->Append(tokens[position], &logits).ok());
    all.insert(all.end(), logits.begin(), logits.end());
  }
  return all;
}

// Decoding with the ops folded into the projections (VulkanOptions::fuse_into_linear, the
// default) and apart: the residual adds are bit for bit (edge_kernels_test), the folded norms
// read the residual unrounded where RmsNorm wrote fp16 (edge_fused_linear_test), so the logits
// agree within the decoding bound at the top of the file: 1e-4 of the largest |logit| in fp32,
// 1e-3 in fp16. The prompt's rows, more than matvec.comp's, run apart either way.
TEST_P(EdgeDecodingVulkanTest, FoldingOpsIntoTheProjectionsKeepsTheLogits) {
  ASSERT_TRUE(vulkan_->FusesIntoLinear(1));
  VulkanOptions options;
  options.validation = true;
  options.precision = GetParam();
  options.fuse_into_linear = false;
  std::unique_ptr<VulkanBackend> apart = testing::VulkanWith(options);
  ASSERT_NE(apart, nullptr);
  ASSERT_FALSE(apart->FusesIntoLinear(1));
  ExportedModelConfig config{97, 64, 3, 4, 2, /*causal=*/true, /*final_norm=*/true, 1e-5};
  fsdpd::testing::TempDir directory("edge-fold");
  const HostModel model = RandomHostModel(directory, "model", config, 28);
  ASSERT_FALSE(model.tensors.empty());
  std::vector<int32_t> tokens(12);
  for (size_t t = 0; t < tokens.size(); ++t) tokens[t] = static_cast<int32_t>((t * 31 + 5) % 97);
  const std::vector<float> folded = EveryLogit(model, *vulkan_, tokens);
  const std::vector<float> unfolded = EveryLogit(model, *apart, tokens);
  ASSERT_EQ(folded.size(), unfolded.size());
  ASSERT_FALSE(folded.empty());
  double largest = 0.0, worst = 0.0;
  size_t differ = 0;
  for (size_t i = 0; i < folded.size(); ++i) {
    ASSERT_TRUE(std::isfinite(folded[i])) << "logit " << i;
    largest = std::max(largest, std::fabs(double(unfolded[i])));
    worst = std::max(worst, std::fabs(double(folded[i]) - unfolded[i]));
    if (folded[i] != unfolded[i]) ++differ;
  }
  const double bound = (vulkan_->uses_fp16() ? 1e-3 : 1e-4) * largest;
  EXPECT_LE(worst, bound) << "of the largest |logit| " << largest;
  // The decoded positions' logits come from the folded ops: some must differ in their bits
  // (the norms' rounding), or the fold did not run.
  EXPECT_GT(differ, 0u);
  EXPECT_EQ(apart->validation_errors(), 0) << apart->last_validation_error();
}

// VulkanOptions::force_staging on lavapipe runs a discrete GPU's path: weights uploaded and
// activations read and written through a staging buffer (the kept one for a token's logits, a
// one-off for a whole window's), each copy recorded after the work before it. The same shaders
// on the same values: the logits are the zero-copy backend's bit for bit.
TEST_P(EdgeDecodingVulkanTest, TheStagedPathDecodesTheSameLogitsBitForBit) {
  VulkanOptions options;
  options.validation = true;
  options.precision = GetParam();
  options.force_staging = true;
  std::unique_ptr<VulkanBackend> staged = testing::VulkanWith(options);
  ASSERT_NE(staged, nullptr);
  ASSERT_FALSE(staged->zero_copy_weights());
  ExportedModelConfig config{97, 64, 3, 4, 2, /*causal=*/true, /*final_norm=*/true, 1e-5};
  fsdpd::testing::TempDir directory("edge-staged");
  const HostModel model = RandomHostModel(directory, "model", config, 26);
  ASSERT_FALSE(model.tensors.empty());
  const int64_t seq = 16;
  std::vector<int32_t> tokens(seq);
  for (int64_t t = 0; t < seq; ++t) tokens[t] = static_cast<int32_t>((t * 29 + 3) % config.vocab);
  const std::vector<float> zero_copy = EveryLogit(model, *vulkan_, tokens);
  const std::vector<float> through_staging = EveryLogit(model, *staged, tokens);
  ASSERT_EQ(zero_copy.size(), through_staging.size());
  for (size_t i = 0; i < zero_copy.size(); ++i) {
    ASSERT_EQ(zero_copy[i], through_staging[i]) << "logit " << i;
  }

  // A round trip larger than the kept staging buffer (16 MiB), then a small one through it.
  for (int64_t count : {int64_t{5} << 20, int64_t{1000}}) {
    SCOPED_TRACE(::testing::Message() << count << " floats");
    const std::vector<float> values = RandomValues(count, 1.0f, 27);
    std::unique_ptr<Buffer> buffer = Upload(*staged, values);
    std::unique_ptr<Buffer> doubled = *staged->Floats(count);
    ASSERT_TRUE(staged->Add(*buffer, *buffer, count, *doubled).ok());
    const std::vector<float> read = ReadAll(*staged, *doubled, count);
    for (int64_t i = 0; i < count; ++i) ASSERT_EQ(read[i], 2.0f * values[i]) << "element " << i;
  }
  EXPECT_EQ(staged->validation_errors(), 0) << staged->last_validation_error();
}

INSTANTIATE_TEST_SUITE_P(Precisions, EdgeDecodingVulkanTest,
                         ::testing::Values(VulkanOptions::Precision::kFp32,
                                           VulkanOptions::Precision::kFp16),
                         [](const auto& info) {
                           return info.param == VulkanOptions::Precision::kFp32 ? "fp32" : "fp16";
                         });

// The CPU backend's buffers together stay within its memory: past it an allocation is an error
// naming the sizes, and a buffer that goes returns its bytes.
TEST(EdgeCpuMemoryTest, BuffersTogetherStayWithinTheBackendsMemory) {
  std::unique_ptr<Backend> cpu = CreateCpuBackend(/*memory_bytes=*/1 << 20);
  std::vector<std::unique_ptr<Buffer>> held;
  for (int i = 0; i < 5; ++i) {
    absl::StatusOr<std::unique_ptr<Buffer>> buffer = cpu->Floats(50000);  // 200 kB
    ASSERT_TRUE(buffer.ok()) << i << ": " << buffer.status();
    held.push_back(std::move(*buffer));
  }
  absl::StatusOr<std::unique_ptr<Buffer>> over = cpu->Ints(50000);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(over.status().message().find("use a smaller batch or sequence"), std::string::npos)
      << over.status();
  const std::vector<float> values(50000, 1.0f);
  EXPECT_FALSE(cpu->Weight(values.data(), 50000).ok()) << "weights count too";
  held.pop_back();
  EXPECT_TRUE(cpu->Ints(50000).ok()) << "a freed buffer's bytes are available again";
  EXPECT_EQ(cpu->Floats(-1).status().code(), absl::StatusCode::kInvalidArgument);
}

// A window whose activations cannot fit is refused as a whole, before any of it is allocated;
// the backend then still runs a window that fits.
TEST(EdgeCpuMemoryTest, AWindowTooLargeIsRefusedBeforeItsTensorsAreAllocated) {
  fsdpd::testing::TempDir directory("edge-memory");
  ExportedModelConfig config{50, 32, 1, 2, 2, /*causal=*/true, false, 1e-5};
  const HostModel model = RandomHostModel(directory, "model", config, 27);
  ASSERT_FALSE(model.tensors.empty());
  std::unique_ptr<Backend> cpu = CreateCpuBackend(/*memory_bytes=*/1 << 20);
  // 10,000 positions of 2 + 7·32 + 2·64 + 50 + 1 elements at 4 bytes: 16.2 MB, asked for at
  // once (a tensor-by-tensor refusal would name the first tensor past the budget instead).
  absl::StatusOr<std::unique_ptr<ModelRunner>> large =
      ModelRunner::Create(model, cpu.get(), 1, 10000);
  ASSERT_FALSE(large.ok());
  EXPECT_EQ(large.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(large.status().message().find("cannot allocate 0.0151 GiB"), std::string::npos)
      << large.status();
  EXPECT_NE(large.status().message().find("use a smaller batch or sequence"), std::string::npos)
      << large.status();
  absl::StatusOr<std::unique_ptr<ModelRunner>> small = ModelRunner::Create(model, cpu.get(), 1, 8);
  ASSERT_TRUE(small.ok()) << small.status();
  std::vector<float> logits;
  EXPECT_TRUE((*small)->Prefill({1, 2, 3}, &logits).ok());
}

// The cache is asked for at once too: a model whose weights and window fit but whose cache of
// qkv rows does not is refused at the first prefill, naming the cache's size, and nothing is
// cached.
TEST(EdgeCpuMemoryTest, ACacheTooLargeIsRefusedAtTheFirstPrefill) {
  fsdpd::testing::TempDir directory("edge-memory");
  ExportedModelConfig config{50, 32, 20, 2, 2, /*causal=*/true, false, 1e-5};
  const HostModel model = RandomHostModel(directory, "model", config, 28);
  ASSERT_FALSE(model.tensors.empty());
  // Weights about 683 kB, the window's activations 112 kB: within 1 MiB. The cache, 20 layers ×
  // 64 positions × 96 floats and the newest row: 491,648 bytes more.
  std::unique_ptr<Backend> cpu = CreateCpuBackend(/*memory_bytes=*/1 << 20);
  absl::StatusOr<std::unique_ptr<ModelRunner>> runner =
      ModelRunner::Create(model, cpu.get(), 1, 64);
  ASSERT_TRUE(runner.ok()) << runner.status();
  std::vector<float> logits;
  const absl::Status status = (*runner)->Prefill({1, 2, 3}, &logits);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  EXPECT_NE(status.message().find("cannot allocate 0.000458 GiB"), std::string::npos) << status;
  EXPECT_EQ((*runner)->cached(), 0);
  // Asked again, the same answer (no half-made cache is taken for a whole one).
  EXPECT_EQ((*runner)->Prefill({1, 2, 3}, &logits).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ((*runner)->Append(4, &logits).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(EdgeDecodingErrorsTest, BadCallsAreClearErrors) {
  fsdpd::testing::TempDir directory("edge-decoding");
  std::unique_ptr<Backend> cpu = CreateCpuBackend();
  auto runner_for = [&](bool causal, int64_t batch) {
    ExportedModelConfig config{50, 32, 1, 2, 2, causal, false, 1e-5};
    const HostModel model = RandomHostModel(directory, causal ? "causal" : "full", config, 26);
    return std::move(*ModelRunner::Create(model, cpu.get(), batch, 8));
  };
  std::vector<float> logits;
  auto expect = [](const absl::Status& status, absl::StatusCode code, const std::string& text) {
    EXPECT_EQ(status.code(), code) << status;
    EXPECT_NE(status.message().find(text), std::string::npos) << status;
  };
  std::unique_ptr<ModelRunner> full = runner_for(false, 1);
  expect(full->Prefill({1, 2}, &logits), absl::StatusCode::kFailedPrecondition,
         "needs a causal model");
  std::unique_ptr<ModelRunner> causal = runner_for(true, 1);
  expect(causal->Append(3, &logits), absl::StatusCode::kFailedPrecondition, "before prefill");
  expect(causal->Prefill({}, &logits), absl::StatusCode::kInvalidArgument, "1 to seq (8)");
  expect(causal->Prefill(std::vector<int32_t>(9, 1), &logits), absl::StatusCode::kInvalidArgument,
         "got 9");
  expect(causal->Prefill({1, 50}, &logits), absl::StatusCode::kInvalidArgument,
         "outside the model's vocab of 50");
  // A refused token leaves the sequence as it was.
  ASSERT_TRUE(causal->Prefill({1, 2}, &logits).ok());
  expect(causal->Append(-1, &logits), absl::StatusCode::kInvalidArgument, "token -1");
  EXPECT_EQ(causal->cached(), 2);
  ASSERT_TRUE(causal->Append(3, &logits).ok());
  EXPECT_EQ(causal->cached(), 3);
  expect(runner_for(true, 2)->Prefill({1}, &logits), absl::StatusCode::kInternal, "batch 1");
}

}  // namespace
}  // namespace fsdpd::edge
