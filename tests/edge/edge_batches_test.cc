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

TEST(EdgeBatchesTest, AChainOfCommandsGivesTheSameResultInAnyBatching) {
  for (const int submit_every : {0, 1, 5, 16}) {
    SCOPED_TRACE(::testing::Message() << "submit_every " << submit_every);
    std::unique_ptr<VulkanBackend> vulkan = Vulkan(submit_every);
    ASSERT_NE(vulkan, nullptr);
    std::unique_ptr<Buffer> a = testing::Filled(*vulkan, 0.0f, kFloats);
    std::unique_ptr<Buffer> b = testing::Filled(*vulkan, 0.0f, kFloats);
    std::unique_ptr<Buffer> one = testing::Filled(*vulkan, 1.0f, kFloats);
    // 300 steps, each reading the last one's output: a += 1 twice, then b = a by a copy in
    // the same recording. A batch run out of order, or a barrier lost between batches, breaks
    // the count.
    for (int step = 0; step < 300; ++step) {
      ASSERT_TRUE(vulkan->Add(*a, *one, kFloats, *a).ok());
      ASSERT_TRUE(vulkan->Add(*a, *one, kFloats, *a).ok());
      ASSERT_TRUE(vulkan->CopyFloats(*a, 0, *b, 0, kFloats).ok());
      ASSERT_TRUE(vulkan->Add(*b, *one, kFloats, *b).ok());
    }
    testing::ExpectAll(*vulkan, *a, 600.0f, kFloats);
    testing::ExpectAll(*vulkan, *b, 601.0f, kFloats);
    // Work after a read runs as well: the batches were all waited for and reset.
    ASSERT_TRUE(vulkan->Add(*a, *b, kFloats, *a).ok());
    testing::ExpectAll(*vulkan, *a, 1201.0f, kFloats);
    EXPECT_EQ(vulkan->validation_errors(), 0) << vulkan->last_validation_error();
  }
}

}  // namespace
}  // namespace fsdpd::edge
