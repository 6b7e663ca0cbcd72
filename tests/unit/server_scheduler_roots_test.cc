// The scheduler's checkpoint-root rule (server/scheduler.h): a job's ranks go only to workers
// that report one checkpoint root identity, and a job that no such group could run is held with
// a reason that names the remedy.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/scheduler.h"

namespace fsdpd::server {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

FleetWorker Worker(const std::string& id, const std::string& host, const std::string& root_id) {
  FleetWorker worker;
  worker.id = id;
  worker.hostname = host;
  worker.device_kind = "cpu";
  worker.root_id = root_id;
  return worker;
}

SchedulableJob Job(const std::string& id, int world_size) {
  SchedulableJob job;
  job.id = id;
  job.device_kind = "cpu";
  job.world_size = world_size;
  return job;
}

TEST(SchedulerRootsTest, RanksGoOnlyToWorkersThatShareARoot) {
  // host-a has two idle workers, on roots A and B; host-b one, on root B. Packing alone would put
  // both ranks on host-a; the root rule puts them on the two workers of root B.
  const Schedule schedule = ScheduleGangs(
      {Job("job-1", 2)},
      {Worker("a1", "host-a", "A"), Worker("a2", "host-a", "B"), Worker("b1", "host-b", "B")});
  ASSERT_EQ(schedule.placements.size(), 1u);
  EXPECT_THAT(schedule.placements[0].worker_ids, UnorderedElementsAre("a2", "b1"));
  EXPECT_THAT(schedule.holds, IsEmpty());
}

TEST(SchedulerRootsTest, AJobNoSharedRootCanHoldIsHeldWithTheRemedy) {
  const Schedule schedule =
      ScheduleGangs({Job("job-1", 2)}, {Worker("a1", "host-a", "A"), Worker("b1", "host-b", "B")});
  EXPECT_THAT(schedule.placements, IsEmpty());
  ASSERT_EQ(schedule.holds.size(), 1u);
  EXPECT_EQ(schedule.holds[0].job_id, "job-1");
  EXPECT_EQ(schedule.holds[0].reason,
            "held: needs 2 cpu workers that share one checkpoint root; the fleet's 2 such "
            "workers see 2 different roots, at most 1 share one (give them one "
            "--checkpoint-root on a shared file system)");
}

TEST(SchedulerRootsTest, WorkersThatShareARootAcrossHostsTakeOneGang) {
  const Schedule schedule =
      ScheduleGangs({Job("job-1", 4)}, {Worker("w1", "host-1", "S"), Worker("w2", "host-2", "S"),
                                        Worker("w3", "host-3", "S"), Worker("w4", "host-4", "S")});
  ASSERT_EQ(schedule.placements.size(), 1u);
  EXPECT_THAT(schedule.placements[0].worker_ids, UnorderedElementsAre("w1", "w2", "w3", "w4"));
}

TEST(SchedulerRootsTest, TwoJobsRunOnTwoRootsSideBySide) {
  // Each host has a worker on root A and one on root B: each job takes one root across hosts.
  const Schedule schedule =
      ScheduleGangs({Job("job-1", 2), Job("job-2", 2)},
                    {Worker("a1", "host-a", "A"), Worker("b1", "host-a", "B"),
                     Worker("a2", "host-b", "A"), Worker("b2", "host-b", "B")});
  ASSERT_EQ(schedule.placements.size(), 2u);
  EXPECT_THAT(schedule.placements[0].worker_ids, UnorderedElementsAre("a1", "a2"));
  EXPECT_THAT(schedule.placements[1].worker_ids, UnorderedElementsAre("b1", "b2"));
}

}  // namespace
}  // namespace fsdpd::server
