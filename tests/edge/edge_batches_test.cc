// The Vulkan backend's early submits (VulkanOptions::submit_every), on lavapipe with the
// validation layer: a chain of commands, each reading what the one before wrote, gives the same
// result whether it is submitted in one batch at Finish, in batches of 1 or 5 commands (the
// ring of batches wrapping many times before Finish waits), and with copies among the
// dispatches; a read waits for every batch before it.
#include <memory>
#include <vector>

#include "tests/edge/edge_test_support.h"

namespace fsdpd::edge {
namespace {

constexpr int64_t kFloats = 1000;

std::unique_ptr<VulkanBackend> Vulkan(int submit_every) {
  VulkanOptions options;
  options.validation = true;
  options.submit_every = submit_every;
  return testing::VulkanWith(options);
}

std::unique_ptr<Buffer> Filled(VulkanBackend& backend, float value) {
  absl::StatusOr<std::unique_ptr<Buffer>> buffer = backend.Floats(kFloats);
  EXPECT_TRUE(buffer.ok()) << buffer.status();
  if (!buffer.ok()) return nullptr;
  const std::vector<float> values(static_cast<size_t>(kFloats), value);
  EXPECT_TRUE(backend.WriteFloats(**buffer, values.data(), kFloats).ok());
  return std::move(*buffer);
}

// Every element of `buffer` (sums of small integers: exact in fp32).
std::vector<float> ReadAll(VulkanBackend& backend, Buffer& buffer) {
  std::vector<float> values(static_cast<size_t>(kFloats), -1.0f);
  EXPECT_TRUE(backend.ReadFloats(buffer, values.data(), kFloats).ok());
  return values;
}

TEST(EdgeBatchesTest, AChainOfCommandsGivesTheSameResultInAnyBatching) {
  for (const int submit_every : {0, 1, 5, 16}) {
    SCOPED_TRACE(::testing::Message() << "submit_every " << submit_every);
    std::unique_ptr<VulkanBackend> vulkan = Vulkan(submit_every);
    ASSERT_NE(vulkan, nullptr);
    std::unique_ptr<Buffer> a = Filled(*vulkan, 0.0f), b = Filled(*vulkan, 0.0f);
    std::unique_ptr<Buffer> one = Filled(*vulkan, 1.0f);
    // 300 steps, each reading the last one's output: a += 1 twice, then b = a by a copy in
    // the same recording. A batch run out of order, or a barrier lost between batches, breaks
    // the count.
    for (int step = 0; step < 300; ++step) {
      ASSERT_TRUE(vulkan->Add(*a, *one, kFloats, *a).ok());
      ASSERT_TRUE(vulkan->Add(*a, *one, kFloats, *a).ok());
      ASSERT_TRUE(vulkan->CopyFloats(*a, 0, *b, 0, kFloats).ok());
      ASSERT_TRUE(vulkan->Add(*b, *one, kFloats, *b).ok());
    }
    const std::vector<float> as = ReadAll(*vulkan, *a), bs = ReadAll(*vulkan, *b);
    for (int64_t i = 0; i < kFloats; ++i) {
      ASSERT_EQ(as[i], 600.0f) << "a[" << i << "]";
      ASSERT_EQ(bs[i], 601.0f) << "b[" << i << "]";
    }
    // Work after a read runs as well: the batches were all waited for and reset.
    ASSERT_TRUE(vulkan->Add(*a, *b, kFloats, *a).ok());
    EXPECT_EQ(ReadAll(*vulkan, *a)[kFloats - 1], 1201.0f);
    EXPECT_EQ(vulkan->validation_errors(), 0) << vulkan->last_validation_error();
  }
}

}  // namespace
}  // namespace fsdpd::edge
