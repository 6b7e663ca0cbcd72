// BackgroundReading (worker/device/background_reading.h): the first figure is read inline, later
// calls return the newest reading finished on the helper thread without waiting for a slow one,
// and the destructor joins a read in flight.
#include <atomic>
#include <chrono>
#include <thread>

#include "gtest/gtest.h"
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
  {
    BackgroundReading<int> reading([&] {
      if (reads.load() > 0) {
        slow_read_started = true;
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
      }
      return ++reads;
    });
    EXPECT_EQ(reading.Latest(), 1);
    ASSERT_TRUE(Eventually([&] { return slow_read_started.load(); }));
    const Clock::time_point start = Clock::now();
    EXPECT_EQ(reading.Latest(), 1) << "the second reading is still under way";
    EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(150));
  }  // destroyed with the slow read in flight: joins it
  EXPECT_EQ(reads.load(), 2);
}

}  // namespace
}  // namespace fsdpd
