// Workers' health on the coordinator: a worker that reports itself unhealthy, or that cannot
// write its checkpoint root, gets no job, and a job that waits because of it says so; and the
// SCHEDULED deadline, which an attempt keeps alive only by showing progress until its first step.
#include <map>

#include "server/scheduler.h"
#include "tests/unit/server_job_manager_fixture.h"

namespace fsdpd::server {
namespace {

using ::testing::ElementsAre;
using ::testing::Not;

class WorkerHealthTest : public JobManagerTest {
 protected:
  // Registers a worker reporting `health` and opens its session.
  std::string AddWorkerWithHealth(const std::string& host, const v1::WorkerHealth& health) {
    v1::RegisterRequest request;
    request.set_hostname(host);
    request.set_device_kind("cpu");
    request.set_gpu_index(-1);
    request.set_memory_bytes(8ll << 30);
    *request.mutable_health() = health;
    absl::StatusOr<v1::RegisterResponse> response = jobs_->RegisterWorker(request);
    EXPECT_TRUE(response.ok()) << response.status();
    auto session = std::make_shared<FakeSession>();
    EXPECT_TRUE(jobs_->OpenSession(response->worker_id(), session).ok());
    sessions_[response->worker_id()] = session;
    return response->worker_id();
  }
  void HealthBeat(const std::string& worker, const v1::WorkerHealth& health) {
    v1::WorkerMessage message;
    message.mutable_heartbeat()->set_unix_millis(1);
    *message.mutable_heartbeat()->mutable_health() = health;
    jobs_->OnWorkerMessage(worker, message);
  }
  void Accept(const std::string& worker, const std::string& job, int attempt, int rank) {
    v1::WorkerMessage message;
    v1::AssignmentAccepted* accepted = message.mutable_accepted();
    accepted->set_job_id(job);
    accepted->set_job_uid(GetJob(job).uid());
    accepted->set_attempt(attempt);
    accepted->set_rank(rank);
    jobs_->OnWorkerMessage(worker, message);
  }
  static std::chrono::milliseconds StartTimeout() {
    return WorkerRegistryConfig{}.heartbeat_timeout + RendezvousConfig{}.default_get_timeout;
  }
};

v1::WorkerHealth Unhealthy(const std::string& why) {
  v1::WorkerHealth health;
  health.set_unhealthy(why);
  return health;
}

v1::WorkerHealth RootError(const std::string& why) {
  v1::WorkerHealth health;
  health.set_checkpoint_root_error(why);
  return health;
}

// The registry shows a worker that cannot write its checkpoint root, or that reported itself
// unhealthy, to the scheduler as away: it counts for the fleet and takes no rank.
TEST_F(WorkerHealthTest, WorkersThatCannotCheckpointOrAreUnhealthyTakeNoRank) {
  const std::string read_only = AddWorkerWithHealth("host-a", RootError("read-only file system"));
  const std::string sick = AddWorkerWithHealth("host-b", Unhealthy("an attempt did not end"));
  const std::string fit = AddWorkerWithHealth("host-c", v1::WorkerHealth());
  std::map<std::string, FleetWorker::State> states;
  for (const FleetWorker& worker : *registry_->Fleet()) states[worker.id] = worker.state;
  EXPECT_EQ(states[read_only], FleetWorker::State::kAway);
  EXPECT_EQ(states[sick], FleetWorker::State::kAway);
  EXPECT_EQ(states[fit], FleetWorker::State::kIdle);
  const Schedule schedule = ScheduleGangs({{"j1", 0, 1, "cpu", 1}}, *registry_->Fleet());
  ASSERT_EQ(schedule.placements.size(), 1u);
  EXPECT_THAT(schedule.placements[0].worker_ids, ElementsAre(fit));
}

TEST_F(WorkerHealthTest, AWorkerReportingItselfUnhealthyGetsNoJob) {
  const std::string sick = AddWorker("host-a", 0);
  HealthBeat(sick, Unhealthy("job-000009 attempt 1 rank 0 did not end"));
  EXPECT_EQ(registry_->Find(sick)->info.health().unhealthy(),
            "job-000009 attempt 1 rank 0 did not end");
  const std::string id = *jobs_->Submit(SmallSpec(1, 0));
  jobs_->Tick();
  EXPECT_EQ(GetJob(id).state(), v1::PENDING);
  EXPECT_TRUE(sessions_[sick]->Assignments().empty());

  const std::string fit = AddWorker("host-b", 0);
  jobs_->Tick();
  EXPECT_EQ(GetJob(id).state(), v1::SCHEDULED);
  EXPECT_THAT(GetJob(id).worker_ids(), ElementsAre(fit));
  EXPECT_TRUE(sessions_[sick]->Assignments().empty());
}

TEST_F(WorkerHealthTest, AnAttemptOnAWorkerThatTurnsUnhealthyFailsAtOnce) {
  const std::string sick = AddWorker("host-a", 0);
  const std::string id = *jobs_->Submit(SmallSpec(1, 1));
  ASSERT_EQ(GetJob(id).state(), v1::SCHEDULED);
  HealthBeat(sick, Unhealthy("job-000001 attempt 1 rank 0 did not end"));
  const v1::Job job = GetJob(id);
  EXPECT_EQ(job.state(), v1::RETRYING);
  EXPECT_THAT(job.reason(), HasSubstr("worker " + sick + " reports itself unhealthy"));
}

TEST_F(WorkerHealthTest, AWorkerThatCannotWriteItsRootGetsNoJobAndTheJobSaysWhy) {
  const std::string why = "the checkpoint root '/ckpt' is not writable: Read-only file system";
  const std::string read_only = AddWorkerWithHealth("host-a", RootError(why));
  const std::string id = *jobs_->Submit(SmallSpec(1, 0));
  jobs_->Tick();
  v1::Job job = GetJob(id);
  EXPECT_EQ(job.state(), v1::PENDING);
  EXPECT_THAT(job.reason(), HasSubstr(read_only + " cannot write its checkpoint root"));
  EXPECT_THAT(job.reason(), HasSubstr("Read-only file system"));

  // Fixed (its next heartbeat says so): the job runs there, and the reason is a transition's.
  HealthBeat(read_only, v1::WorkerHealth());
  jobs_->Tick();
  job = GetJob(id);
  EXPECT_EQ(job.state(), v1::SCHEDULED);
  EXPECT_THAT(job.worker_ids(), ElementsAre(read_only));
  EXPECT_THAT(job.reason(), Not(HasSubstr("checkpoint root")));
}

TEST_F(WorkerHealthTest, TheWaitingReasonGoesWhenTheWorkerDoes) {
  const std::string read_only = AddWorkerWithHealth("host-a", RootError("read-only"));
  const std::string id = *jobs_->Submit(SmallSpec(2, 0));
  jobs_->Tick();
  EXPECT_THAT(GetJob(id).reason(), HasSubstr("cannot write its checkpoint root"));
  // Unhealthy now (restarted as a fit worker on another host would be a new id): the job's
  // reason follows, in the same words every waiting job's reason uses.
  HealthBeat(read_only, Unhealthy("stuck"));
  jobs_->Tick();
  EXPECT_EQ(GetJob(id).state(), v1::PENDING);
  EXPECT_EQ(GetJob(id).reason(), "held: needs 2 cpu workers; the fleet has 1 registered; 1 away (" +
                                     read_only + " reports itself unhealthy: stuck)");
}

TEST_F(WorkerHealthTest, AnAttemptThatHangsAfterAcceptingFailsNamingItsLastStep) {
  const std::string w0 = AddWorker("host-a", 0);
  const std::string id = *jobs_->Submit(SmallSpec(1, 1));
  ASSERT_EQ(GetJob(id).state(), v1::SCHEDULED);
  Accept(w0, id, 1, 0);
  SendLog(w0, id, 1, "opening data.path '/data/corpus.txt'");
  // Progress keeps the attempt alive past the first deadline...
  now_ += StartTimeout() - std::chrono::seconds(5);
  Heartbeat(w0);
  jobs_->Tick();
  SendLog(w0, id, 2, "loading checkpoint.init_from '/data/init.safetensors'");
  now_ += StartTimeout() - std::chrono::seconds(5);
  Heartbeat(w0);
  jobs_->Tick();
  EXPECT_EQ(GetJob(id).state(), v1::SCHEDULED) << GetJob(id).reason();
  // ...and its absence for StartTimeout() ends it, naming the step it hangs in.
  now_ += std::chrono::seconds(10);
  Heartbeat(w0);
  jobs_->Tick();
  const v1::Job job = GetJob(id);
  EXPECT_EQ(job.state(), v1::RETRYING);
  EXPECT_THAT(job.reason(), HasSubstr("rank 0 (worker " + w0 + ") showed no progress"));
  EXPECT_THAT(job.reason(),
              HasSubstr("its last step: loading checkpoint.init_from '/data/init.safetensors'"));
}

TEST_F(WorkerHealthTest, TheFirstStepEndsTheScheduledDeadline) {
  const std::string w0 = AddWorker("host-a", 0);
  const std::string id = *jobs_->Submit(SmallSpec(1, 1));
  Accept(w0, id, 1, 0);
  Step(w0, id, 1, 0, 1, 4.0, 100);
  ASSERT_EQ(GetJob(id).state(), v1::RUNNING);
  now_ += StartTimeout() * 3;
  Heartbeat(w0);
  jobs_->Tick();
  EXPECT_EQ(GetJob(id).state(), v1::RUNNING);
}

}  // namespace
}  // namespace fsdpd::server
