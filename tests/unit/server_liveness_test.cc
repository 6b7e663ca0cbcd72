// Overload must not look like death (server/job_manager_liveness.cc): a worker is lost only on
// evidence. The coordinator's own processing lag, a session it stopped reading, and a mass
// silence of the fleet each keep silent workers from being declared lost; a worker whose stream
// ended, or one that stays silent alone once the coordinator hears the others, is lost as
// before. Fixture: server_job_manager_fixture.h (heartbeat timeout 10 s, interval 1 s).
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

  // w0 is heard again; w1 alone stays silent: that is evidence, and it is lost.
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

}  // namespace
}  // namespace fsdpd::server
