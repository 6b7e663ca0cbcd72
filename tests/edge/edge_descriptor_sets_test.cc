// The Vulkan backend's kept descriptor sets (VulkanOptions::cache_descriptor_sets), on lavapipe
// with the validation layer: a (pipeline, buffers) pair that runs again reuses its set, a buffer
// made after another was freed never finds the freed one's set, more pairs than the pool holds
// drop the kept sets in the middle of a recording without a wrong result or a validation error,
// and with the cache off every dispatch writes a set. The test of freed buffers runs without the
// layer, which wraps every handle in one never reused and so would hide a set kept by handle.
#include <memory>
#include <vector>

#include "tests/edge/edge_test_support.h"

namespace fsdpd::edge {
namespace {

constexpr int64_t kFloats = 256;

std::unique_ptr<VulkanBackend> Vulkan(bool cache, bool validation = true) {
  VulkanOptions options;
  options.validation = validation;
  options.cache_descriptor_sets = cache;
  return testing::VulkanWith(options);
}

std::unique_ptr<Buffer> Filled(VulkanBackend& backend, float value, int64_t floats = kFloats) {
  return testing::Filled(backend, value, floats);
}
void ExpectAll(VulkanBackend& backend, Buffer& buffer, float expected, int64_t floats = kFloats) {
  testing::ExpectAll(backend, buffer, expected, floats);
}

TEST(EdgeDescriptorSetsTest, APairThatRunsAgainReusesItsSet) {
  std::unique_ptr<VulkanBackend> backend = Vulkan(true);
  ASSERT_NE(backend, nullptr);
  std::unique_ptr<Buffer> a = Filled(*backend, 1.0f), b = Filled(*backend, 2.0f);
  std::unique_ptr<Buffer> out = Filled(*backend, 0.0f);
  const int64_t before = backend->descriptor_sets_written();
  ASSERT_TRUE(backend->Add(*a, *b, kFloats, *out).ok());
  ASSERT_TRUE(backend->Finish().ok());
  EXPECT_EQ(backend->descriptor_sets_written(), before + 1);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(backend->Add(*a, *out, kFloats, *out).ok());
  ASSERT_TRUE(backend->Finish().ok());
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(backend->Add(*a, *out, kFloats, *out).ok());
  EXPECT_EQ(backend->descriptor_sets_written(), before + 2);  // (a, out, out) once
  ASSERT_TRUE(backend->Add(*b, *a, kFloats, *out).ok());      // another order, another pair
  EXPECT_EQ(backend->descriptor_sets_written(), before + 3);
  ASSERT_TRUE(backend->Finish().ok());
  ExpectAll(*backend, *out, 3.0f);
  EXPECT_EQ(backend->validation_errors(), 0) << backend->last_validation_error();
}

TEST(EdgeDescriptorSetsTest, ABufferMadeAfterAFreedOneNeverFindsItsSet) {
  // Without the validation layer, which wraps every handle in one never reused.
  std::unique_ptr<VulkanBackend> backend = Vulkan(true, /*validation=*/false);
  ASSERT_NE(backend, nullptr);
  constexpr int kRounds = 20;
  std::unique_ptr<Buffer> one = Filled(*backend, 1.0f, kRounds * kFloats);
  // Each round frees its buffers and makes new, larger ones, which a driver may give the freed
  // ones' handles (lavapipe does) but not their memory: a set found by handle would bind the
  // freed memory.
  for (int round = 0; round < kRounds; ++round) {
    const int64_t floats = (round + 1) * kFloats;
    std::unique_ptr<Buffer> x = Filled(*backend, static_cast<float>(round), floats);
    std::unique_ptr<Buffer> out = Filled(*backend, -1.0f, floats);
    ASSERT_TRUE(backend->Add(*x, *one, floats, *out).ok());
    ASSERT_TRUE(backend->Finish().ok());
    ExpectAll(*backend, *out, static_cast<float>(round + 1), floats);
  }
}

TEST(EdgeDescriptorSetsTest, MorePairsThanThePoolHoldsInOneRecording) {
  std::unique_ptr<VulkanBackend> backend = Vulkan(true);
  ASSERT_NE(backend, nullptr);
  constexpr int kBuffers = 1300;  // the pool holds 1,024 sets
  std::vector<std::unique_ptr<Buffer>> buffers;
  for (int i = 0; i < kBuffers; ++i) buffers.push_back(Filled(*backend, static_cast<float>(i)));
  const int64_t before = backend->descriptor_sets_written();
  for (int round = 0; round < 2; ++round) {  // x ← x + x, all recorded before one Finish
    for (auto& x : buffers) ASSERT_TRUE(backend->Add(*x, *x, kFloats, *x).ok());
  }
  ASSERT_TRUE(backend->Finish().ok());
  for (int i = 0; i < kBuffers; ++i) ExpectAll(*backend, *buffers[i], 4.0f * i);
  // Round two found none of the sets dropped when the pool filled, and wrote them again.
  EXPECT_GT(backend->descriptor_sets_written() - before, kBuffers);
  EXPECT_EQ(backend->validation_errors(), 0) << backend->last_validation_error();
}

TEST(EdgeDescriptorSetsTest, WithTheCacheOffEveryDispatchWritesASet) {
  std::unique_ptr<VulkanBackend> backend = Vulkan(false);
  ASSERT_NE(backend, nullptr);
  std::unique_ptr<Buffer> x = Filled(*backend, 1.0f);
  const int64_t before = backend->descriptor_sets_written();
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(backend->Add(*x, *x, kFloats, *x).ok());
  ASSERT_TRUE(backend->Finish().ok());
  EXPECT_EQ(backend->descriptor_sets_written(), before + 5);
  ExpectAll(*backend, *x, 32.0f);
  EXPECT_EQ(backend->validation_errors(), 0) << backend->last_validation_error();
}

}  // namespace
}  // namespace fsdpd::edge
