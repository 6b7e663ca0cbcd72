// Backpressure on step reports (server/report_pacer.h): the interval follows the processing
// lag, starts at the heartbeat interval, doubles while the lag stays high up to a quarter of the
// heartbeat timeout, and eases only after a calm spell, so it does not flap at the bound.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/report_pacer.h"

namespace fsdpd::server {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;

class ReportPacerTest : public ::testing::Test {
 protected:
  // The coordinator's defaults: a 1 s heartbeat and a 10 s timeout.
  ReportPacer pacer_{ReportPacer::RulesFor(seconds(1), seconds(10))};
  ReportPacer::Clock::time_point now_{};

  // One tick 200 ms after the last, with this lag.
  std::string Tick(milliseconds lag) {
    now_ += milliseconds(200);
    return pacer_.Update(lag, now_);
  }
  // Ticks for `how_long` with this lag; returns the interval at the end.
  milliseconds Hold(milliseconds lag, milliseconds how_long) {
    for (milliseconds spent{0}; spent < how_long; spent += milliseconds(200)) Tick(lag);
    return pacer_.interval();
  }
};

TEST_F(ReportPacerTest, RulesFollowTheHeartbeat) {
  const ReportPacer::Rules rules = ReportPacer::RulesFor(seconds(1), seconds(10));
  EXPECT_EQ(rules.heartbeat_interval, seconds(1));
  EXPECT_EQ(rules.max_interval, milliseconds(2500));
  EXPECT_EQ(rules.engage_lag, milliseconds(250));
  EXPECT_EQ(rules.calm_lag, milliseconds(50));
  // A timeout under four beats never paces slower than the beat itself.
  EXPECT_EQ(ReportPacer::RulesFor(seconds(1), seconds(2)).max_interval, seconds(1));
}

TEST_F(ReportPacerTest, UnpacedWhileTheCoordinatorKeepsUp) {
  EXPECT_EQ(Hold(milliseconds(0), seconds(60)), milliseconds(0));
  // Up to the bound, a lag is no reason to pace.
  EXPECT_EQ(Hold(milliseconds(250), seconds(60)), milliseconds(0));
  EXPECT_EQ(pacer_.engagements(), 0);
}

TEST_F(ReportPacerTest, PacesAtTheBeatThenSlowerWhileTheLagLastsUpToTheCeiling) {
  EXPECT_THAT(Tick(milliseconds(400)),
              HasSubstr("step reports paced: the coordinator lags 400 ms"));
  EXPECT_EQ(pacer_.interval(), seconds(1));
  EXPECT_EQ(pacer_.engagements(), 1);
  // Each level is kept for `settle` (3 s) before it doubles: workers adopt it at their next ack.
  EXPECT_EQ(Hold(milliseconds(400), milliseconds(2800)), seconds(1));
  EXPECT_THAT(Tick(milliseconds(400)), HasSubstr("every 2000 ms"));
  EXPECT_EQ(Hold(milliseconds(400), seconds(3)), milliseconds(2500));
  EXPECT_EQ(Hold(milliseconds(5000), seconds(60)), milliseconds(2500));
  EXPECT_EQ(pacer_.engagements(), 1);
}

TEST_F(ReportPacerTest, EasesStepByStepOnlyAfterACalmSpell) {
  Tick(milliseconds(400));
  Hold(milliseconds(400), seconds(6));
  ASSERT_EQ(pacer_.interval(), milliseconds(2500));
  // Between the bounds nothing changes, however long.
  EXPECT_EQ(Hold(milliseconds(100), seconds(120)), milliseconds(2500));
  // Calm for less than 30 s: still paced; a lag in between restarts the spell.
  EXPECT_EQ(Hold(milliseconds(10), seconds(20)), milliseconds(2500));
  Tick(milliseconds(100));
  EXPECT_EQ(Hold(milliseconds(10), seconds(20)), milliseconds(2500));
  // 30 s calm: halves to the beat (never below it), then after another spell, unpaced.
  EXPECT_EQ(Hold(milliseconds(10), seconds(11)), milliseconds(1250));
  EXPECT_EQ(Hold(milliseconds(10), seconds(29)), milliseconds(1250));
  EXPECT_EQ(Hold(milliseconds(10), seconds(2)), seconds(1));
  std::string eased;
  for (int i = 0; i < 200 && pacer_.interval().count() > 0; ++i) eased = Tick(milliseconds(10));
  EXPECT_THAT(eased, HasSubstr("no longer paced"));
  EXPECT_EQ(pacer_.interval(), milliseconds(0));
  // A new overload paces again, and counts.
  Tick(milliseconds(1000));
  EXPECT_EQ(pacer_.interval(), seconds(1));
  EXPECT_EQ(pacer_.engagements(), 2);
}

}  // namespace
}  // namespace fsdpd::server
