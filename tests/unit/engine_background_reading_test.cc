// BackgroundReading (worker/device/background_reading.h): the first figure is read inline, later
// calls return the newest reading finished on the helper thread without waiting for a slow one,
// and the destructor joins a read in flight.
#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "gtest/gtest.h"
#include "tests/support/thread_state.h"
#include "worker/device/background_reading.h"

namespace fsdpd {
namespace {

using Clock = std::chrono::steady_clock;

// Waits up to two seconds for `done`.
template <typename Predicate>
bool Eventually(Predicate done) {
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(2);
  while (!done()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

TEST(BackgroundReadingTest, TheFirstReadIsInlineAndLaterOnesComeFromTheHelperThread) {
  std::atomic<int> reads{0};
  BackgroundReading<int> reading([&] { return ++reads; });
  EXPECT_EQ(reading.Latest(), 1) << "nothing read yet: the first call reads itself";
  // That call asked for the next reading; once it is in, the next call returns it.
  ASSERT_TRUE(Eventually([&] { return reads.load() == 2; }));
  int latest = 0;
  ASSERT_TRUE(Eventually([&] { return (latest = reading.Latest()) == 2; }));
  EXPECT_TRUE(Eventually([&] { return reads.load() >= 3; })) << "and asked for another";
}

TEST(BackgroundReadingTest, ASlowReadDoesNotHoldTheCallerAndIsJoinedAtTheEnd) {
  std::atomic<int> reads{0};
  std::atomic<bool> slow_read_started{false};
  std::atomic<bool> slow_read_finished{false};
  // The second read is slow: it waits for the gate, which the test opens (a deadline ends the
  // wait where a broken Latest() or destructor would otherwise hang the test).
  std::promise<void> gate;
  std::shared_future<void> opened = gate.get_future().share();
  const pid_t caller = testing::CurrentThreadId();
  std::thread opener;
  {
    BackgroundReading<int> reading([&] {
      if (reads.load() > 0) {
        slow_read_started = true;
        opened.wait_for(std::chrono::seconds(20));
        slow_read_finished = true;
      }
      return ++reads;
    });
    EXPECT_EQ(reading.Latest(), 1);
    ASSERT_TRUE(Eventually([&] { return slow_read_started.load(); }));
    EXPECT_EQ(reading.Latest(), 1) << "the second reading is still under way";
    EXPECT_FALSE(slow_read_finished.load()) << "Latest() waited for the slow read";
    // The gate opens once this thread is blocked in the destructor, with the read in flight.
    opener = std::thread([&] {
      testing::WaitUntilBlocked(caller, std::chrono::seconds(10));
      gate.set_value();
    });
  }  // destroyed with the slow read in flight: joins it
  EXPECT_TRUE(slow_read_finished.load()) << "the destructor returned before the read it ran";
  EXPECT_EQ(reads.load(), 2);
  opener.join();
}

}  // namespace
}  // namespace fsdpd
