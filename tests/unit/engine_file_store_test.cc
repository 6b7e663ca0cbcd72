#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/thread_state.h"
#include "tests/unit/engine_test_support.h"
#include "worker/comm/file_key_value_store.h"

namespace fsdpd {
namespace {

using std::chrono::milliseconds;

TEST(FileKeyValueStoreTest, SetThenGetReturnsTheValueAndOverwriteReplacesIt) {
  testing::TempDir dir;
  auto store = FileKeyValueStore::Open(dir.path() + "/nested/store");
  ASSERT_TRUE(store.ok()) << store.status();
  const std::string binary("a\0b/../c", 8);
  ASSERT_TRUE((*store)->Set("job/1/addr", binary).ok());
  auto value = (*store)->Get("job/1/addr", milliseconds(100));
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, binary);
  ASSERT_TRUE((*store)->Set("job/1/addr", "second").ok());
  EXPECT_EQ(*(*store)->Get("job/1/addr", milliseconds(100)), "second");
  // Keys that differ only in characters the file name must escape stay distinct.
  ASSERT_TRUE((*store)->Set("job.1.addr", "dots").ok());
  EXPECT_EQ(*(*store)->Get("job/1/addr", milliseconds(100)), "second");
}

TEST(FileKeyValueStoreTest, GetTimesOutOnAMissingKey) {
  testing::TempDir dir;
  auto store = FileKeyValueStore::Open(dir.path());
  ASSERT_TRUE(store.ok());
  const auto start = std::chrono::steady_clock::now();
  auto value = (*store)->Get("never", milliseconds(150));
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(value.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(value.status().message().find("never"), std::string::npos);
  EXPECT_GE(waited, milliseconds(150));
  EXPECT_LT(waited, milliseconds(2000));
}

TEST(FileKeyValueStoreTest, GetWaitsForAKeySetLater) {
  testing::TempDir dir;
  auto store = FileKeyValueStore::Open(dir.path());
  ASSERT_TRUE(store.ok());
  // The key is written only once the reader is asleep between two looks for it.
  const pid_t reader = testing::CurrentThreadId();
  std::atomic<bool> reading{false};
  std::atomic<bool> reader_was_waiting{false};
  std::thread writer([&] {
    while (!reading.load()) std::this_thread::yield();
    reader_was_waiting = testing::WaitUntilBlocked(reader, milliseconds(5000));
    ASSERT_TRUE((*store)->Set("late", "here").ok());
  });
  reading = true;
  auto value = (*store)->Get("late", milliseconds(10000));
  writer.join();
  EXPECT_TRUE(reader_was_waiting.load());
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, "here");
}

TEST(FileKeyValueStoreTest, AddIsAtomicAcrossConcurrentWriters) {
  testing::TempDir dir;
  constexpr int kThreads = 4;
  constexpr int kAddsPerThread = 50;
  std::vector<std::thread> threads;
  std::vector<std::vector<int64_t>> seen(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // A store object per thread, as separate processes would have.
      auto store = FileKeyValueStore::Open(dir.path());
      ASSERT_TRUE(store.ok());
      for (int i = 0; i < kAddsPerThread; ++i) {
        auto value = (*store)->Add("counter", 1);
        ASSERT_TRUE(value.ok()) << value.status();
        seen[t].push_back(*value);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  std::vector<bool> returned(kThreads * kAddsPerThread + 1, false);
  for (const auto& values : seen) {
    for (int64_t value : values) {
      ASSERT_GE(value, 1);
      ASSERT_LE(value, kThreads * kAddsPerThread);
      EXPECT_FALSE(returned[value]) << "value " << value << " returned twice";
      returned[value] = true;
    }
  }
  auto store = FileKeyValueStore::Open(dir.path());
  EXPECT_EQ(*(*store)->Add("counter", -5), kThreads * kAddsPerThread - 5);
}

TEST(FileKeyValueStoreTest, RejectsBadInput) {
  EXPECT_FALSE(FileKeyValueStore::Open("").ok());
  testing::TempDir dir;
  auto store = FileKeyValueStore::Open(dir.path());
  ASSERT_TRUE(store.ok());
  EXPECT_EQ((*store)->Set("", "x").code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE((*store)->Set("text", "not a number").ok());
  auto added = (*store)->Add("text", 1);
  EXPECT_EQ(added.status().code(), absl::StatusCode::kFailedPrecondition);
  // The value that was not a counter is left as it was.
  EXPECT_EQ(*(*store)->Get("text", milliseconds(10)), "not a number");
}

}  // namespace
}  // namespace fsdpd
