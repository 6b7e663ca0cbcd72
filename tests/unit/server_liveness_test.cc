// Overload must not look like death (server/job_manager_liveness.cc): a worker is lost only on
// evidence. The coordinator's own processing lag, a session it stopped reading, and a mass
// silence of the fleet each keep silent workers from being declared lost; a worker whose stream
// ended, or one that stays silent alone for a timeout once the coordinator hears the others
// again, is lost as before. Fixture: server_job_manager_fixture.h (heartbeat timeout 10 s,
// interval 1 s).
#include "tests/unit/server_job_manager_fixture.h"

namespace fsdpd::server {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST_F(JobManagerTest, MassSilenceDeclaresNoWorkerWithAnOpenSessionLost) {
  const std::string w0 = AddWorker("host-a", 0);
  const std::string w1 = AddWorker("host-b", 0);
  const std::string id = *jobs_->Submit(SmallSpec(2, 2));
  Step(w0, id, 1, 0, 1, 5.0, 10);
  Step(w1, id, 1, 1, 1, 5.0, 10);

  // Both go quiet at once (the coordinator's host or network, more likely than two deaths).
  now_ += seconds(11);
  jobs_->Tick();
  EXPECT_EQ(StateOf(w0), v1::BUSY);
  EXPECT_EQ(StateOf(w1), v1::BUSY);
  EXPECT_EQ(GetJob(id).state(), v1::RUNNING);
  JobManager::LivenessHealth health = jobs_->GetLivenessHealth();
  EXPECT_TRUE(health.suspended);
  EXPECT_EQ(health.held_workers, 2);
  EXPECT_THAT(health.reason, HasSubstr("2 of 2 workers went silent"));
  EXPECT_EQ(health.suspensions, 1);

  // w0 is heard again: the hold ends, and w1's silence counts from then (after a partition,
  // workers reconnect one by one), so it is not lost yet...
  Heartbeat(w0);
  jobs_->Tick();
  EXPECT_FALSE(jobs_->GetLivenessHealth().suspended);
  EXPECT_EQ(StateOf(w1), v1::BUSY);
  now_ += seconds(9);
  Heartbeat(w0);
  jobs_->Tick();
  EXPECT_EQ(StateOf(w1), v1::BUSY);
  EXPECT_EQ(GetJob(id).state(), v1::RUNNING);
  // ...until a full timeout passes with w1 alone silent: that is evidence, and it is lost.
  now_ += seconds(2);
  Heartbeat(w0);
  jobs_->Tick();
  EXPECT_EQ(StateOf(w1), v1::LOST);
  EXPECT_EQ(GetJob(id).state(), v1::RETRYING);
  EXPECT_THAT(GetJob(id).reason(), HasSubstr("worker " + w1 + " lost"));
  EXPECT_FALSE(jobs_->GetLivenessHealth().suspended);
}

TEST_F(JobManagerTest, AWorkerWhoseStreamEndedIsLostDuringAMassSilence) {
  const std::string w0 = AddWorker("host-a", 0);
  const std::string w1 = AddWorker("host-b", 0);
  const std::string w2 = AddWorker("host-c", 0);
  jobs_->CloseSession(w2, sessions_[w2].get());
  now_ += seconds(11);
  jobs_->Tick();
  EXPECT_EQ(StateOf(w0), v1::IDLE);
  EXPECT_EQ(StateOf(w1), v1::IDLE);
  EXPECT_EQ(StateOf(w2), v1::LOST);
  EXPECT_EQ(jobs_->GetLivenessHealth().held_workers, 2);
}

TEST_F(JobManagerTest, ProcessingLagSuspendsLostWorkerDecisionsAndSilenceCountsFromCatchUp) {
  // Two of four silent: no mass silence, so only the lag keeps them.
  const std::string w0 = AddWorker("host-a", 0);
  const std::string w1 = AddWorker("host-b", 0);
  const std::string w2 = AddWorker("host-c", 0);
  const std::string w3 = AddWorker("host-d", 0);
  auto beat_the_others = [&] {
    Heartbeat(w0);
    Heartbeat(w3);
  };

  // The coordinator stalled (a late tick): w1 and w2 look silent, but it could not read them.
  now_ += seconds(11);
  beat_the_others();
  jobs_->processing_lag().NoteStall(seconds(4));  // above the bound, 10 s / 4
  jobs_->Tick();
  JobManager::LivenessHealth health = jobs_->GetLivenessHealth();
  EXPECT_TRUE(health.suspended);
  EXPECT_EQ(health.lag_millis, 4000);
  EXPECT_THAT(health.reason, HasSubstr("lags 4000 ms"));
  EXPECT_EQ(StateOf(w1), v1::IDLE);
  EXPECT_EQ(StateOf(w2), v1::IDLE);

  // Caught up: silence counts from then, so a full timeout passes before anyone is lost.
  now_ += seconds(6);
  beat_the_others();
  jobs_->Tick();
  EXPECT_FALSE(jobs_->GetLivenessHealth().suspended);
  EXPECT_EQ(StateOf(w1), v1::IDLE);
  EXPECT_EQ(StateOf(w2), v1::IDLE);
  Heartbeat(w1);  // w1 speaks again; w2 stays silent
  now_ += seconds(5);
  beat_the_others();
  Heartbeat(w1);
  jobs_->Tick();
  EXPECT_EQ(StateOf(w2), v1::LOST);
  EXPECT_EQ(StateOf(w1), v1::IDLE);
  EXPECT_EQ(jobs_->GetLivenessHealth().suspensions, 1);
}

TEST_F(JobManagerTest, AWorkerWhoseSessionTheCoordinatorStoppedReadingIsNotSilent) {
  const std::string w0 = AddWorker("host-a", 0);
  const std::string w1 = AddWorker("host-b", 0);
  const std::string w2 = AddWorker("host-c", 0);
  jobs_->NoteReadPaused(w1, true);
  now_ += seconds(11);
  Heartbeat(w0);
  Heartbeat(w2);
  jobs_->Tick();
  EXPECT_EQ(StateOf(w1), v1::IDLE);
  // Reading resumes: its silence counts from now.
  jobs_->NoteReadPaused(w1, false);
  now_ += seconds(6);
  Heartbeat(w0);
  Heartbeat(w2);
  jobs_->Tick();
  EXPECT_EQ(StateOf(w1), v1::IDLE);
  now_ += seconds(5);
  Heartbeat(w0);
  Heartbeat(w2);
  jobs_->Tick();
  EXPECT_EQ(StateOf(w1), v1::LOST);
}

TEST_F(JobManagerTest, ALoneSilentWorkerIsLostWithoutSuspendingAnything) {
  const std::string w0 = AddWorker("host-a", 0);
  const std::string w1 = AddWorker("host-b", 0);
  const std::string w2 = AddWorker("host-c", 0);
  now_ += seconds(11);
  Heartbeat(w0);
  Heartbeat(w1);
  jobs_->Tick();
  EXPECT_EQ(StateOf(w2), v1::LOST);
  EXPECT_FALSE(jobs_->GetLivenessHealth().suspended);
  EXPECT_EQ(jobs_->GetLivenessHealth().suspensions, 0);
}

// A partition longer than the heartbeat timeout, shorter than the ranks' collective timeout:
// the worker comes back still inside the old attempt. It is told to stop that attempt, and is
// kept off the scheduler until it reports the rank ended, instead of being handed the retry it
// would refuse as busy (which spent a restart per refusal).
TEST_F(JobManagerTest, ALostWorkerHeardAgainStaysBusyUntilItsOldRankEnds) {
  const std::string w0 = AddWorker("host-a", 0);
  const std::string w1 = AddWorker("host-b", 0);
  const std::string w2 = AddWorker("host-c", 0);
  const std::string id = *jobs_->Submit(SmallSpec(2, 3));
  const v1::Job first = GetJob(id);
  ASSERT_EQ(first.worker_ids_size(), 2);
  const std::string kept = first.worker_ids(0);
  const std::string cut = first.worker_ids(1);
  const std::string spare = kept != w2 && cut != w2 ? w2 : (kept != w1 && cut != w1 ? w1 : w0);
  Step(kept, id, 1, 0, 1, 5.0, 10);
  Step(cut, id, 1, 1, 1, 5.0, 10);

  now_ += seconds(11);
  Heartbeat(kept);
  Heartbeat(spare);
  jobs_->Tick();
  ASSERT_EQ(StateOf(cut), v1::LOST);
  ASSERT_EQ(GetJob(id).state(), v1::RETRYING);
  bool told = false;
  for (const v1::CoordinatorMessage& message : sessions_[cut]->messages) {
    told = told || (message.has_cancellation() && message.cancellation().job_id() == id &&
                    message.cancellation().attempt() == 1);
  }
  EXPECT_TRUE(told) << "the lost worker was not told to stop attempt 1";

  // Heard again on its stream, still in attempt 1: busy, and no rank of the retry goes to it.
  Heartbeat(cut);
  EXPECT_EQ(StateOf(cut), v1::BUSY);
  Result(kept, id, 1, 0, false, "", /*cancelled=*/true);
  jobs_->Tick();
  const v1::Job retried = GetJob(id);
  EXPECT_EQ(retried.attempt(), 2);
  EXPECT_EQ(retried.worker_ids_size(), 2);
  for (const std::string& worker : retried.worker_ids()) EXPECT_NE(worker, cut);

  // Once it reports the old rank ended, it is idle again.
  Result(cut, id, 1, 1, false, "", /*cancelled=*/true);
  EXPECT_EQ(StateOf(cut), v1::IDLE);
}

}  // namespace
}  // namespace fsdpd::server
