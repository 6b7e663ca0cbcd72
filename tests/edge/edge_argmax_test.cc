// Backend::Argmax, greedy decoding's pick on the device, against edge/argmax.h's rule on the
// host: the Vulkan shader (lavapipe, with the validation layer) and the CPU backend give the
// same index as GreedyPick on rows built to catch a wrong rule: a tie (the smaller index wins),
// the largest value at either end and in each lane of the shader's stride, NaN beside the
// largest, -inf, a row of NaN, and vocabularies below, at and past the workgroup's 256 lanes.
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "edge/argmax.h"
#include "edge/cpu_backend.h"
#include "tests/edge/edge_test_support.h"

namespace fsdpd::edge {
namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

struct Row {
  std::string name;
  std::vector<float> values;
};

std::vector<float> Random(int64_t count, uint32_t seed) {
  std::mt19937 random(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> values(static_cast<size_t>(count));
  for (float& value : values) value = normal(random);
  return values;
}

std::vector<Row> Rows() {
  std::vector<Row> rows;
  for (int64_t vocab : {1, 7, 256, 257, 1000, 32000}) {
    rows.push_back(
        {"random " + std::to_string(vocab), Random(vocab, static_cast<uint32_t>(vocab))});
  }
  std::vector<float> tie = Random(1000, 3);
  tie[700] = tie[300] = tie[555] = 50.0f;  // three lanes of the stride hold the largest value
  rows.push_back({"tie", tie});
  std::vector<float> same_lane = Random(1000, 4);
  same_lane[3 + 256] = same_lane[3 + 512] = 50.0f;  // one lane sees both
  rows.push_back({"tie in one lane", same_lane});
  std::vector<float> last = Random(1000, 5);
  last[999] = 60.0f;
  rows.push_back({"largest last", last});
  std::vector<float> first = Random(1000, 6);
  first[0] = 60.0f;
  rows.push_back({"largest first", first});
  std::vector<float> nan = Random(1000, 7);
  nan[10] = 40.0f;
  nan[11] = nan[0] = nan[999] = kNan;
  rows.push_back({"NaN beside the largest", nan});
  rows.push_back({"all -inf", std::vector<float>(300, -kInf)});
  std::vector<float> inf_and_nan(300, -kInf);
  inf_and_nan[0] = kNan;
  inf_and_nan[299] = kInf;
  rows.push_back({"+inf last, NaN first", inf_and_nan});
  rows.push_back({"all NaN", std::vector<float>(300, kNan)});
  std::vector<float> zeros(300, 0.0f);
  zeros[5] = -0.0f;  // equal to +0: the smaller index, 0, wins
  rows.push_back({"signed zeros", zeros});
  return rows;
}

TEST(EdgeArgmaxTest, TheHostRuleOnHandMadeRows) {
  EXPECT_EQ(GreedyPick(std::vector<float>{1, 3, 3, 2}.data(), 4), 1);
  EXPECT_EQ(GreedyPick(std::vector<float>{kNan, -1, kNan}.data(), 3), 1);
  EXPECT_EQ(GreedyPick(std::vector<float>{kNan, kNan}.data(), 2), 0);
  EXPECT_EQ(GreedyPick(std::vector<float>{-kInf, -kInf, -kInf}.data(), 3), 0);
  EXPECT_EQ(GreedyPick(std::vector<float>{-kInf, -5, kInf}.data(), 3), 2);
  EXPECT_EQ(GreedyPick(nullptr, 0), 0);
}

// Every row through both backends, each pick written to next[0] and history[i]; next is
// poisoned between rows and history is read once at the end, as AppendGreedy reads it.
TEST(EdgeArgmaxTest, TheDeviceAndTheCpuPickWhatTheHostRulePicks) {
  std::unique_ptr<VulkanBackend> vulkan = testing::ValidatedVulkan();
  ASSERT_NE(vulkan, nullptr);
  std::unique_ptr<Backend> cpu = CreateCpuBackend();
  const std::vector<Row> rows = Rows();
  const auto count = static_cast<int64_t>(rows.size());
  for (Backend* backend : {static_cast<Backend*>(cpu.get()), static_cast<Backend*>(vulkan.get())}) {
    SCOPED_TRACE(backend->Describe());
    std::unique_ptr<Buffer> next = *backend->Ints(1);
    std::unique_ptr<Buffer> history = *backend->Ints(count);
    const std::vector<int32_t> poison(static_cast<size_t>(count), -7);
    ASSERT_TRUE(backend->WriteInts(*history, poison.data(), count).ok());
    std::vector<std::unique_ptr<Buffer>> logits;  // alive until the picks are read
    for (int64_t i = 0; i < count; ++i) {
      const std::vector<float>& values = rows[static_cast<size_t>(i)].values;
      const auto vocab = static_cast<int64_t>(values.size());
      logits.push_back(*backend->Floats(vocab + 5));  // longer than the vocabulary
      std::vector<float> padded = values;
      padded.resize(static_cast<size_t>(vocab + 5), 1e30f);  // past vocab: never read
      ASSERT_TRUE(backend->WriteFloats(*logits.back(), padded.data(), vocab + 5).ok());
      const int32_t poison_next = -3;
      ASSERT_TRUE(backend->WriteInts(*next, &poison_next, 1).ok());
      ASSERT_TRUE(backend->Argmax(*logits.back(), vocab, *next, *history, i).ok());
      int32_t picked_next = -1;
      ASSERT_TRUE(backend->ReadInts(*next, &picked_next, 1).ok());
      EXPECT_EQ(picked_next, GreedyPick(values.data(), vocab)) << rows[static_cast<size_t>(i)].name;
    }
    std::vector<int32_t> picked(static_cast<size_t>(count));
    ASSERT_TRUE(backend->ReadInts(*history, picked.data(), count).ok());
    for (int64_t i = 0; i < count; ++i) {
      const Row& row = rows[static_cast<size_t>(i)];
      EXPECT_EQ(picked[static_cast<size_t>(i)],
                GreedyPick(row.values.data(), static_cast<int64_t>(row.values.size())))
          << row.name;
    }
  }
  EXPECT_EQ(vulkan->validation_errors(), 0) << vulkan->last_validation_error();
}

TEST(EdgeArgmaxTest, ArgumentsOutsideTheBuffersAreRefused) {
  std::unique_ptr<VulkanBackend> vulkan = testing::ValidatedVulkan();
  ASSERT_NE(vulkan, nullptr);
  std::unique_ptr<Backend> cpu = CreateCpuBackend();
  for (Backend* backend : {static_cast<Backend*>(cpu.get()), static_cast<Backend*>(vulkan.get())}) {
    SCOPED_TRACE(backend->Describe());
    std::unique_ptr<Buffer> logits = *backend->Floats(100);
    std::unique_ptr<Buffer> next = *backend->Ints(1);
    std::unique_ptr<Buffer> history = *backend->Ints(4);
    for (auto [vocab, index] : {std::pair<int64_t, int64_t>{101, 0}, {0, 0}, {100, 4}, {100, -1}}) {
      const absl::Status status = backend->Argmax(*logits, vocab, *next, *history, index);
      EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << vocab << ", " << index;
      EXPECT_NE(status.message().find("Argmax: a vocab of"), std::string::npos) << status;
    }
    std::vector<int32_t> ids(5);
    for (const int64_t count : {int64_t{5}, int64_t{-1}}) {
      const absl::Status read = backend->ReadInts(*history, ids.data(), count);
      EXPECT_EQ(read.code(), absl::StatusCode::kInvalidArgument) << count;
      EXPECT_NE(read.message().find(absl::StrCat("ReadInts of ", count, " ids from a buffer of 4")),
                std::string::npos)
          << read;
    }
    EXPECT_TRUE(backend->Finish().ok());
  }
  EXPECT_EQ(vulkan->validation_errors(), 0) << vulkan->last_validation_error();
}

}  // namespace
}  // namespace fsdpd::edge
