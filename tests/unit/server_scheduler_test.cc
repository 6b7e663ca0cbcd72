// The scheduler's rules (server/scheduler.h), one test each: gangs, queue order, held jobs,
// memory, packing, backfill, reservation and preemption.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/scheduler.h"

namespace fsdpd::server {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using State = FleetWorker::State;

FleetWorker Worker(const std::string& id, const std::string& host, int gpu,
                   const std::string& kind = "cuda", int64_t memory = 0) {
  FleetWorker worker;
  worker.id = id;
  worker.hostname = host;
  worker.device_kind = kind;
  worker.gpu_index = gpu;
  worker.memory_bytes = memory;
  return worker;
}

FleetWorker Busy(const std::string& id, const std::string& host, const std::string& job,
                 const std::string& kind = "cuda") {
  FleetWorker worker = Worker(id, host, 0, kind);
  worker.state = State::kRunning;
  worker.job_id = job;
  return worker;
}

FleetWorker InState(FleetWorker worker, State state) {
  worker.state = state;
  return worker;
}

SchedulableJob Job(const std::string& id, int world_size, int priority = 0, int64_t order = 0,
                   const std::string& kind = "cuda", int64_t memory = 0) {
  return {id, priority, order, kind, world_size, memory};
}

RunningJob Running(const std::string& id, int priority, int64_t order, int64_t started,
                   bool backfilled, const std::string& kind = "cuda") {
  return {id, priority, order, kind, started, backfilled};
}

std::vector<Placement> Place(std::vector<SchedulableJob> jobs, std::vector<FleetWorker> fleet) {
  return ScheduleGangs(std::move(jobs), std::move(fleet)).placements;
}

std::vector<std::string> PlacedIds(const Schedule& schedule) {
  std::vector<std::string> ids;
  for (const Placement& placement : schedule.placements) ids.push_back(placement.job_id);
  return ids;
}

std::vector<std::string> PreemptedIds(const Schedule& schedule) {
  std::vector<std::string> ids;
  for (const Preemption& preemption : schedule.preemptions) ids.push_back(preemption.job_id);
  return ids;
}

TEST(SchedulerTest, GangIsAllOrNothing) {
  // Three workers exist, one busy: nothing starts until all three are idle.
  std::vector<Placement> placements = Place(
      {Job("big", 3)}, {Worker("a", "h1", 0), Worker("b", "h1", 1), Busy("c", "h2", "other")});
  EXPECT_THAT(placements, IsEmpty());

  placements =
      Place({Job("big", 3)}, {Worker("a", "h1", 0), Worker("b", "h1", 1), Worker("c", "h2", 0)});
  ASSERT_EQ(placements.size(), 1u);
  EXPECT_EQ(placements[0].worker_ids.size(), 3u);
}

TEST(SchedulerTest, HigherPriorityFirstThenSubmitOrder) {
  std::vector<Placement> placements =
      Place({Job("low-early", 1, 0, 1), Job("high", 1, 5, 3), Job("low-late", 1, 0, 2)},
            {Worker("a", "h1", 0), Worker("b", "h1", 1)});
  ASSERT_EQ(placements.size(), 2u);
  EXPECT_EQ(placements[0].job_id, "high");
  EXPECT_EQ(placements[1].job_id, "low-early");
}

TEST(SchedulerTest, AJobThatCannotStartLendsOnlyIdleWorkersItIsNotWaitingFor) {
  // The 4-rank job (the head) waits for two busy GPUs whose job was not lent them; the 1-rank
  // cuda job behind it starts on an idle one, marked backfilled ahead of the head. A cpu job is
  // unaffected.
  Schedule schedule =
      ScheduleGangs({Job("wide", 4, 0, 1), Job("narrow", 1, 0, 2), Job("cpu-job", 1, 0, 3, "cpu")},
                    {Worker("g0", "h1", 0), Worker("g1", "h1", 1), Busy("g2", "h2", "old"),
                     Busy("g3", "h2", "old"), Worker("c0", "h1", 0, "cpu")},
                    {Running("old", 0, 0, 1, /*backfilled=*/false)});
  ASSERT_THAT(PlacedIds(schedule), ElementsAre("narrow", "cpu-job"));
  EXPECT_TRUE(schedule.placements[0].backfilled);
  EXPECT_EQ(schedule.placements[0].ahead_of, "wide");
  EXPECT_FALSE(schedule.placements[1].backfilled);
  EXPECT_THAT(schedule.placements[1].worker_ids, ElementsAre("c0"));
  EXPECT_THAT(schedule.preemptions, IsEmpty());  // a job that was not lent workers keeps them
  EXPECT_THAT(schedule.holds, IsEmpty());
}

TEST(SchedulerTest, OnlyWorkersOfTheJobsDeviceKind) {
  Schedule schedule = ScheduleGangs({Job("gpu-job", 2)},
                                    {Worker("c0", "h1", 0, "cpu"), Worker("c1", "h1", 1, "cpu")});
  EXPECT_THAT(schedule.placements, IsEmpty());
  ASSERT_EQ(schedule.holds.size(), 1u);
  EXPECT_EQ(schedule.holds[0].reason,
            "held: needs 2 cuda workers; the fleet has 0 registered; idle now: 2 cpu workers, 0 "
            "cuda");
}

TEST(SchedulerTest, EveryWaitingJobSaysWhyNamingTheBusyJobAndTheJobAhead) {
  // Both GPUs run "old"; "high" waits for them, "low" waits behind "high".
  Schedule schedule = ScheduleGangs({Job("low", 1, 0, 2), Job("high", 1, 5, 3)},
                                    {Busy("g0", "h1", "old"), Busy("g1", "h1", "old")},
                                    {Running("old", 0, 0, 1, /*backfilled=*/false)});
  EXPECT_THAT(schedule.placements, IsEmpty());
  EXPECT_THAT(schedule.holds, IsEmpty());
  ASSERT_EQ(schedule.waits.size(), 2u);
  EXPECT_EQ(schedule.waits[0].job_id, "high");
  EXPECT_EQ(schedule.waits[0].reason, "waiting for 1 idle cuda worker; 0 idle, 2 busy with old");
  EXPECT_EQ(schedule.waits[1].job_id, "low");
  EXPECT_EQ(schedule.waits[1].reason,
            "waiting for 1 idle cuda worker; 0 idle, 2 busy with old; behind high (priority 5), "
            "which is ahead in the queue for cuda workers");
}

TEST(SchedulerTest, AWaitingJobNamesWorkersThatAreAwayFinishingLostOrTooSmall) {
  FleetWorker away = InState(Worker("g1", "h1", 1), State::kAway);
  away.away_reason = "cannot write its checkpoint root (read-only)";
  Schedule schedule =
      ScheduleGangs({Job("job", 4, 0, 1, "cuda", 10ll << 30)},
                    {Worker("g0", "h1", 0, "cuda", 16ll << 30), away,
                     InState(Worker("g2", "h1", 2, "cuda", 16ll << 30), State::kDraining),
                     InState(Worker("g3", "h2", 0, "cuda", 16ll << 30), State::kLost),
                     Worker("small", "h2", 1, "cuda", 1ll << 30)});
  ASSERT_EQ(schedule.waits.size(), 1u);
  EXPECT_EQ(schedule.waits[0].reason,
            "waiting for 4 idle cuda workers with at least 10240 MiB; 1 idle, 1 finishing an "
            "ended attempt, 1 lost, 1 too small, 1 away (g1 cannot write its checkpoint root "
            "(read-only))");
}

TEST(SchedulerTest, PacksOntoFewestHostsAndOrdersRanksByHostThenGpu) {
  // h2 has three idle GPUs, h1 one and h3 two: a 4-rank job takes h2 whole, then one more
  // from the next largest host (h3), lowest gpu_index first.
  std::vector<Placement> placements = Place(
      {Job("job", 4)}, {Worker("h1-0", "h1", 0), Worker("h2-2", "h2", 2), Worker("h2-0", "h2", 0),
                        Worker("h3-1", "h3", 1), Worker("h2-1", "h2", 1), Worker("h3-0", "h3", 0)});
  ASSERT_EQ(placements.size(), 1u);
  EXPECT_THAT(placements[0].worker_ids, ElementsAre("h2-0", "h2-1", "h2-2", "h3-0"));
}

TEST(SchedulerTest, SeveralJobsShareThePoolWithoutOverlap) {
  std::vector<Placement> placements = Place(
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

TEST(SchedulerTest, AJobNoFleetCouldRunIsHeldWithItsReasonAndBlocksNobody) {
  // The hog asks for more workers than are registered, at the highest priority: it is held,
  // and the one-rank job behind it runs on an idle worker, not backfilled (nothing waits).
  Schedule schedule =
      ScheduleGangs({Job("hog", 1000, 1000, 1, "cpu"), Job("small", 1, 0, 2, "cpu")},
                    {Worker("c0", "h1", 0, "cpu"), Worker("c1", "h2", 0, "cpu")});
  ASSERT_EQ(schedule.holds.size(), 1u);
  EXPECT_EQ(schedule.holds[0].job_id, "hog");
  EXPECT_EQ(schedule.holds[0].reason, "held: needs 1000 cpu workers; the fleet has 2 registered");
  ASSERT_THAT(PlacedIds(schedule), ElementsAre("small"));
  EXPECT_FALSE(schedule.placements[0].backfilled);
}

TEST(SchedulerTest, TheFleetCountsBusyAndReconnectingWorkersButPlacesOnlyOnIdleOnes) {
  // Three workers are registered (one idle, one busy, one without a session yet): a 3-rank job
  // is not held, and does not start.
  Schedule schedule =
      ScheduleGangs({Job("three", 3)}, {Worker("a", "h1", 0), Busy("b", "h1", "other"),
                                        InState(Worker("c", "h2", 0), State::kAway)});
  EXPECT_THAT(schedule.holds, IsEmpty());
  EXPECT_THAT(schedule.placements, IsEmpty());
  // A worker without a session takes no rank, even for a job that fits the idle ones.
  EXPECT_THAT(Place({Job("one", 1)}, {InState(Worker("c", "h2", 0), State::kAway)}), IsEmpty());
}

TEST(SchedulerTest, RanksGoOnlyToWorkersWithEnoughMemoryAndTooFewOfThemHold) {
  constexpr int64_t kGiB = int64_t{1} << 30;
  const std::vector<FleetWorker> fleet = {Worker("small-0", "h1", 0, "cpu", 8 * kGiB),
                                          Worker("small-1", "h1", 1, "cpu", 8 * kGiB),
                                          Worker("large", "h2", 0, "cpu", 16 * kGiB)};
  // One rank of 10 GiB goes to the large worker although the small host has more idle ones.
  std::vector<Placement> placements = Place({Job("one", 1, 0, 1, "cpu", 10 * kGiB)}, fleet);
  ASSERT_EQ(placements.size(), 1u);
  EXPECT_THAT(placements[0].worker_ids, ElementsAre("large"));
  // Two ranks of 10 GiB: only one worker has that much, so the job is held, saying so, and a
  // job that fits the small workers still starts.
  Schedule schedule = ScheduleGangs(
      {Job("two", 2, 5, 1, "cpu", 10 * kGiB), Job("fits", 2, 0, 2, "cpu", 4 * kGiB)}, fleet);
  ASSERT_EQ(schedule.holds.size(), 1u);
  EXPECT_EQ(schedule.holds[0].reason,
            "held: needs 2 cpu workers with at least 10240 MiB each (one rank's estimate); the "
            "fleet has 3 registered, 1 with that much");
  ASSERT_THAT(PlacedIds(schedule), ElementsAre("fits"));
  // A worker whose memory is unknown (0) fits any job, and so does a job that needs nothing.
  EXPECT_EQ(Place({Job("any", 1, 0, 1, "cpu", 10 * kGiB)}, {Worker("u", "h", 0, "cpu")}).size(),
            1u);
  EXPECT_EQ(Place({Job("none", 1, 0, 1, "cpu")}, {Worker("s", "h", 0, "cpu", 1)}).size(), 1u);
}

FleetWorker WithCapability(FleetWorker worker, int compute_capability) {
  worker.compute_capability = compute_capability;
  return worker;
}

SchedulableJob NeedingCapability(SchedulableJob job, int compute_capability) {
  job.min_compute_capability = compute_capability;
  return job;
}

TEST(SchedulerTest, AJobThatNeedsANewerGpuGoesOnlyToWorkersThatHaveOne) {
  constexpr int64_t kGiB = int64_t{1} << 30;
  // An A100 (8.0) host with two idle workers and an H100 (9.0) with one: the FP8 job (8.9)
  // takes the H100 although the A100 host has more idle workers.
  const std::vector<FleetWorker> fleet = {WithCapability(Worker("a100-0", "h1", 0), 80),
                                          WithCapability(Worker("a100-1", "h1", 1), 80),
                                          WithCapability(Worker("h100", "h2", 0), 90)};
  std::vector<Placement> placements = Place({NeedingCapability(Job("fp8", 1), 89)}, fleet);
  ASSERT_EQ(placements.size(), 1u);
  EXPECT_THAT(placements[0].worker_ids, ElementsAre("h100"));
  // Two ranks: one worker is new enough, so the job is held and says what it needs, while a
  // bf16 job of the same size starts on the old ones.
  Schedule schedule = ScheduleGangs({NeedingCapability(Job("fp8-2", 2, 5, 1, "cuda", kGiB), 89),
                                     Job("bf16-2", 2, 0, 2, "cuda", kGiB)},
                                    fleet);
  ASSERT_EQ(schedule.holds.size(), 1u);
  EXPECT_EQ(schedule.holds[0].reason,
            "held: needs 2 cuda workers with at least 1024 MiB each (one rank's estimate) and "
            "compute capability 8.9 or newer; the fleet has 3 registered, 1 that fit");
  ASSERT_THAT(PlacedIds(schedule), ElementsAre("bf16-2"));
  // While the new worker is busy, the job waits for it and counts the old ones as unfit.
  schedule = ScheduleGangs({NeedingCapability(Job("fp8", 1), 89)},
                           {WithCapability(Worker("a100", "h1", 0), 80),
                            WithCapability(Busy("h100", "h2", "other"), 90)});
  ASSERT_EQ(schedule.waits.size(), 1u);
  EXPECT_EQ(schedule.waits[0].reason,
            "waiting for 1 idle cuda worker with at least 0 MiB and compute capability 8.9 or "
            "newer; 0 idle, 1 busy with other, 1 too small or too old");
  // A worker that does not say (0, an older worker binary) fits; it refuses the job itself if
  // its GPU cannot run it.
  EXPECT_EQ(Place({NeedingCapability(Job("fp8", 1), 89)}, {Worker("quiet", "h", 0)}).size(), 1u);
}

TEST(SchedulerTest, TheHeadReservesIdleWorkersWhileDrainingOnesComeBack) {
  // The head needs two; one is idle and one drains (its attempt ended): nobody backfills onto
  // the idle one, and nothing needs preempting.
  Schedule schedule = ScheduleGangs(
      {Job("head", 2, 5, 1), Job("small", 1, 0, 2)},
      {Worker("idle", "h1", 0), InState(Busy("drain", "h1", "ended"), State::kDraining)});
  EXPECT_THAT(schedule.placements, IsEmpty());
  EXPECT_THAT(schedule.preemptions, IsEmpty());
}

TEST(SchedulerTest, TheHeadPreemptsABackfilledJobThatHoldsWhatItNeeds) {
  // "lent" started on an idle worker while the head waited; now the head could start with it.
  Schedule schedule = ScheduleGangs({Job("head", 2, 5, 1), Job("small", 1, 0, 3)},
                                    {Worker("idle", "h1", 0), Busy("w1", "h1", "lent")},
                                    {Running("lent", 0, 2, 7, /*backfilled=*/true)});
  ASSERT_EQ(schedule.preemptions.size(), 1u);
  EXPECT_EQ(schedule.preemptions[0].job_id, "lent");
  EXPECT_EQ(schedule.preemptions[0].for_job_id, "head");
  // The idle worker is kept for the head: the small job does not take it.
  EXPECT_THAT(schedule.placements, IsEmpty());
}

TEST(SchedulerTest, VictimsAreTheLowestPriorityThenTheMostRecentlyStarted) {
  const std::vector<FleetWorker> fleet = {Worker("idle", "h0", 0), Busy("a", "h1", "low"),
                                          Busy("b", "h2", "new"), Busy("c", "h3", "old")};
  Schedule schedule = ScheduleGangs({Job("head", 2, 5, 1)}, fleet,
                                    {Running("low", -1, 2, 1, true), Running("new", 0, 3, 9, true),
                                     Running("old", 0, 4, 2, true)});
  EXPECT_THAT(PreemptedIds(schedule), ElementsAre("low"));
  schedule = ScheduleGangs({Job("head", 2, 5, 1)}, fleet,
                           {Running("low", 1, 2, 1, true), Running("new", 0, 3, 9, true),
                            Running("old", 0, 4, 2, true)});
  EXPECT_THAT(PreemptedIds(schedule), ElementsAre("new"));
}

TEST(SchedulerTest, TheFewestVictimsAreTakenAndTheRestSpared) {
  // The head needs two more workers. Preferring the lowest priority would take "one" (a single
  // worker) and then "two"; "two" alone is enough, so "one" is spared.
  Schedule schedule =
      ScheduleGangs({Job("head", 2, 5, 1)},
                    {Busy("a", "h1", "one"), Busy("b", "h2", "two"), Busy("c", "h2", "two")},
                    {Running("one", -5, 2, 3, true), Running("two", 0, 3, 1, true)});
  EXPECT_THAT(PreemptedIds(schedule), ElementsAre("two"));
}

TEST(SchedulerTest, OnlyBackfilledJobsBehindTheHeadArePreempted) {
  // A backfilled job ahead of the head in the queue (higher priority) keeps its worker, and so
  // does a job that was never lent workers; the head then reserves nothing, so idle workers are
  // lent out.
  Schedule schedule =
      ScheduleGangs({Job("head", 3, 5, 1), Job("small", 1, 0, 9)},
                    {Worker("idle", "h0", 0), Busy("a", "h1", "ahead"), Busy("b", "h2", "plain")},
                    {Running("ahead", 7, 5, 3, true), Running("plain", 0, 6, 4, false)});
  EXPECT_THAT(schedule.preemptions, IsEmpty());
  EXPECT_THAT(PlacedIds(schedule), ElementsAre("small"));
  // Equal priority: submitted earlier is ahead, so the head does not preempt it either.
  schedule =
      ScheduleGangs({Job("head", 2, 5, 10)}, {Worker("idle", "h0", 0), Busy("a", "h1", "earlier")},
                    {Running("earlier", 5, 3, 3, true)});
  EXPECT_THAT(schedule.preemptions, IsEmpty());
}

TEST(SchedulerTest, NoVictimsWhenEvenAllOfThemWouldNotBeEnough) {
  Schedule schedule =
      ScheduleGangs({Job("head", 3, 5, 1)},
                    {Worker("idle", "h0", 0), Busy("a", "h1", "lent"), Busy("b", "h2", "plain")},
                    {Running("lent", 0, 2, 3, true), Running("plain", 0, 3, 4, false)});
  EXPECT_THAT(schedule.preemptions, IsEmpty());
}

}  // namespace
}  // namespace fsdpd::server
