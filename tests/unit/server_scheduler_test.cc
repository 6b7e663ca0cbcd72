#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/scheduler.h"

namespace fsdpd::server {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

IdleWorker Worker(const std::string& id, const std::string& host, int gpu,
                  const std::string& kind = "cuda") {
  return {id, host, kind, gpu};
}

SchedulableJob Job(const std::string& id, int world_size, int priority = 0, int64_t order = 0,
                   const std::string& kind = "cuda") {
  return {id, priority, order, kind, world_size};
}

TEST(SchedulerTest, GangIsAllOrNothing) {
  std::vector<Placement> placements =
      ScheduleGangs({Job("big", 3)}, {Worker("a", "h1", 0), Worker("b", "h1", 1)});
  EXPECT_THAT(placements, IsEmpty());

  placements = ScheduleGangs({Job("big", 3)},
                             {Worker("a", "h1", 0), Worker("b", "h1", 1), Worker("c", "h2", 0)});
  ASSERT_EQ(placements.size(), 1u);
  EXPECT_EQ(placements[0].worker_ids.size(), 3u);
}

TEST(SchedulerTest, HigherPriorityFirstThenSubmitOrder) {
  std::vector<Placement> placements =
      ScheduleGangs({Job("low-early", 1, 0, 1), Job("high", 1, 5, 3), Job("low-late", 1, 0, 2)},
                    {Worker("a", "h1", 0), Worker("b", "h1", 1)});
  ASSERT_EQ(placements.size(), 2u);
  EXPECT_EQ(placements[0].job_id, "high");
  EXPECT_EQ(placements[1].job_id, "low-early");
}

TEST(SchedulerTest, BlockedJobBlocksLaterJobsOfSameKindOnly) {
  // The 4-rank job cannot start; the 1-rank cuda job behind it must wait (no starvation),
  // but a cpu job is unaffected.
  std::vector<Placement> placements =
      ScheduleGangs({Job("wide", 4, 0, 1), Job("narrow", 1, 0, 2), Job("cpu-job", 1, 0, 3, "cpu")},
                    {Worker("g0", "h1", 0), Worker("g1", "h1", 1), Worker("c0", "h1", 0, "cpu")});
  ASSERT_EQ(placements.size(), 1u);
  EXPECT_EQ(placements[0].job_id, "cpu-job");
  EXPECT_THAT(placements[0].worker_ids, ElementsAre("c0"));
}

TEST(SchedulerTest, OnlyWorkersOfTheJobsDeviceKind) {
  std::vector<Placement> placements = ScheduleGangs(
      {Job("gpu-job", 2)}, {Worker("c0", "h1", 0, "cpu"), Worker("c1", "h1", 1, "cpu")});
  EXPECT_THAT(placements, IsEmpty());
}

TEST(SchedulerTest, PacksOntoFewestHostsAndOrdersRanksByHostThenGpu) {
  // h2 has three idle GPUs, h1 one and h3 two: a 4-rank job takes h2 whole, then one more
  // from the next largest host (h3), lowest gpu_index first.
  std::vector<Placement> placements = ScheduleGangs(
      {Job("job", 4)}, {Worker("h1-0", "h1", 0), Worker("h2-2", "h2", 2), Worker("h2-0", "h2", 0),
                        Worker("h3-1", "h3", 1), Worker("h2-1", "h2", 1), Worker("h3-0", "h3", 0)});
  ASSERT_EQ(placements.size(), 1u);
  EXPECT_THAT(placements[0].worker_ids, ElementsAre("h2-0", "h2-1", "h2-2", "h3-0"));
}

TEST(SchedulerTest, SeveralJobsShareThePoolWithoutOverlap) {
  std::vector<Placement> placements = ScheduleGangs(
      {Job("a", 2, 0, 1), Job("b", 2, 0, 2), Job("c", 1, 0, 3)},
      {Worker("x0", "x", 0), Worker("x1", "x", 1), Worker("y0", "y", 0), Worker("y1", "y", 1)});
  ASSERT_EQ(placements.size(), 2u);
  EXPECT_EQ(placements[0].job_id, "a");
  EXPECT_EQ(placements[1].job_id, "b");
  // Each job stays on one host.
  EXPECT_EQ(placements[0].worker_ids[0].substr(0, 1), placements[0].worker_ids[1].substr(0, 1));
  EXPECT_EQ(placements[1].worker_ids[0].substr(0, 1), placements[1].worker_ids[1].substr(0, 1));
  EXPECT_NE(placements[0].worker_ids[0].substr(0, 1), placements[1].worker_ids[0].substr(0, 1));
}

}  // namespace
}  // namespace fsdpd::server
