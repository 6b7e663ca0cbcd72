// The job manager sharing the cluster: held jobs and their reasons, backfill and preemption
// without a spent restart, the priority cap per role, the worker memory ceiling and the evidence
// of an OOM-killed attempt. Fixture: server_job_manager_fixture.h.
#include "tests/unit/server_job_manager_fixture.h"

namespace fsdpd::server {
namespace {

using ::testing::Contains;

constexpr int64_t kGiB = int64_t{1} << 30;

v1::JobSpec WithPriority(v1::JobSpec spec, int priority) {
  spec.set_priority(priority);
  return spec;
}

// A spec whose rank needs hundreds of GB.
v1::JobSpec HugeSpec() {
  v1::JobSpec spec = SmallSpec(2, 0);
  spec.mutable_model()->set_vocab(32000);
  spec.mutable_model()->set_dim(8192);
  spec.mutable_model()->set_layers(64);
  spec.mutable_model()->set_heads(64);
  return spec;
}

bool HasReason(const v1::Job& job, const std::string& text) {
  for (const v1::StateChange& change : job.transitions()) {
    if (change.reason().find(text) != std::string::npos) return true;
  }
  return false;
}

TEST_F(JobManagerTest, APriorityAboveTheRolesCapIsRefusedNamingTheCap) {
  std::vector<FieldError> errors;
  absl::StatusOr<std::string> refused =
      jobs_->Submit(WithPriority(SmallSpec(1, 0), 101), "token:alice", &errors, Role::kSubmitter);
  EXPECT_TRUE(absl::IsInvalidArgument(refused.status())) << refused.status();
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].field, "priority");
  EXPECT_THAT(errors[0].message, HasSubstr("at most 100 for the role submitter"));
  EXPECT_TRUE(
      jobs_->Submit(WithPriority(SmallSpec(1, 0), 100), "token:alice", nullptr, Role::kSubmitter)
          .ok());
  // An admin (and every caller without authentication) may go to the spec's own bound.
  EXPECT_TRUE(jobs_->Submit(WithPriority(SmallSpec(1, 0), 1000)).ok());
  EXPECT_THAT(jobs_->CheckSpec(WithPriority(SmallSpec(1, 0), 101), Role::kSubmitter),
              Contains(::testing::Field(&FieldError::field, "priority")));

  max_priority_admin_ = 500;
  Restart();
  errors.clear();
  EXPECT_FALSE(jobs_->Submit(WithPriority(SmallSpec(1, 0), 501), "", &errors).ok());
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_THAT(errors[0].message, HasSubstr("at most 500 for the role admin"));
}

TEST_F(JobManagerTest, AMemoryClaimIsAdmittedOnlyUpToTheCeiling) {
  // Without a ceiling, a claim is taken as it is, and no worker means no memory check.
  EXPECT_TRUE(jobs_->CheckSpec(HugeSpec()).empty());
  registry_config_.max_memory_cpu = 8 * kGiB;
  Restart();
  // No worker registered yet: the ceiling alone bounds what any worker could be admitted with.
  std::vector<FieldError> errors = jobs_->CheckSpec(HugeSpec());
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].field, "parallel.device");
  EXPECT_THAT(errors[0].message, HasSubstr("at most 8192 MiB (--max-worker-memory)"));

  const std::string rogue = AddWorker("rogue", 0, "", {}, int64_t{1} << 50);
  const v1::Worker listed = registry_->Find(rogue)->info;
  EXPECT_EQ(listed.memory_bytes(), 8 * kGiB);
  EXPECT_EQ(listed.claimed_memory_bytes(), int64_t{1} << 50);
  EXPECT_THAT(listed.memory_note(), HasSubstr("--max-worker-memory"));
  errors = jobs_->CheckSpec(HugeSpec());
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_THAT(errors[0].message, HasSubstr("the largest registered cpu worker has 8192 MiB"));
  EXPECT_FALSE(jobs_->Submit(HugeSpec()).ok());
  // A claim below the ceiling is taken as it is; a claim of nothing is admitted the ceiling.
  EXPECT_EQ(registry_->Find(AddWorker("small", 0, "", {}, kGiB))->info.memory_bytes(), kGiB);
  EXPECT_EQ(registry_->Find(AddWorker("silent", 0, "", {}, 0))->info.memory_bytes(), 8 * kGiB);
}

TEST_F(JobManagerTest, AJobNoFleetCouldRunIsHeldWithItsReasonUntilWorkersRegister) {
  const std::string w0 = AddWorker("host-a", 0);
  // Within a heartbeat timeout of the start the fleet may still be coming back: the reason is
  // shown but not stored, and the job already blocks nobody.
  const std::string early = *jobs_->Submit(SmallSpec(3, 0));
  EXPECT_EQ(GetJob(early).reason(), "held: needs 3 cpu workers; the fleet has 1 registered");
  EXPECT_EQ(GetJob(early).transitions_size(), 1);
  ASSERT_TRUE(jobs_->Cancel(early, "").ok());
  now_ += std::chrono::seconds(11);
  Heartbeat(w0);

  const std::string hog = *jobs_->Submit(WithPriority(SmallSpec(2, 0), 1000));
  v1::Job job = GetJob(hog);
  EXPECT_EQ(job.state(), v1::PENDING);
  EXPECT_EQ(job.reason(), "held: needs 2 cpu workers; the fleet has 1 registered");
  const std::string small = *jobs_->Submit(SmallSpec(1, 0));
  EXPECT_EQ(GetJob(small).state(), v1::SCHEDULED);
  EXPECT_FALSE(GetJob(small).backfilled());  // nothing waited for its worker
  jobs_->Tick();
  EXPECT_EQ(GetJob(hog).transitions_size(), 2);  // the same reason is not stored again

  // A second worker: the fleet can run the held job; it waits for the busy one.
  const std::string w1 = AddWorker("host-b", 0);
  job = GetJob(hog);
  EXPECT_EQ(job.state(), v1::PENDING);
  EXPECT_EQ(job.transitions(job.transitions_size() - 1).reason(),
            "the fleet can run it now; waiting for workers");
  EXPECT_EQ(job.reason(), "waiting for 2 idle cpu workers; 1 idle, 1 busy with " + small);
  EXPECT_EQ(StateOf(w1), v1::IDLE);
  Result(w0, small, 1, 0, true);
  EXPECT_EQ(GetJob(small).state(), v1::SUCCEEDED);
  EXPECT_EQ(GetJob(hog).state(), v1::SCHEDULED);
}

// A large gang's SCHEDULED reason names its first 4 workers and counts the rest (the attempt
// lists them all); a small gang's names every worker.
TEST_F(JobManagerTest, AScheduledReasonNamesAtMostFourWorkers) {
  std::vector<std::string> workers;
  for (int index = 0; index < 6; ++index) workers.push_back(AddWorker("host-a", index));
  const std::string large = *jobs_->Submit(SmallSpec(6, 0));
  v1::Job job = GetJob(large);
  ASSERT_EQ(job.state(), v1::SCHEDULED);
  const std::string reason = job.transitions(job.transitions_size() - 1).reason();
  EXPECT_THAT(reason, ::testing::StartsWith("attempt 1 on 6 workers: "));
  EXPECT_THAT(reason, ::testing::EndsWith(" and 2 more (fsdpctl describe lists them)"));
  EXPECT_EQ(job.attempts(0).ranks_size(), 6);
  ASSERT_TRUE(jobs_->Cancel(large, "").ok());
  for (const std::string& worker : workers) Result(worker, large, 1, 0, false);

  const std::string small = *jobs_->Submit(SmallSpec(2, 0));
  job = GetJob(small);
  ASSERT_EQ(job.state(), v1::SCHEDULED);
  EXPECT_EQ(job.transitions(job.transitions_size() - 1).reason(),
            absl::StrCat("attempt 1 on ", job.worker_ids(0), ", ", job.worker_ids(1)));
}

TEST_F(JobManagerTest, AHeldReasonFollowsTheFleetAtMostOnceAHeartbeatTimeout) {
  const std::string w0 = AddWorker("host-a", 0);
  now_ += std::chrono::seconds(11);
  Heartbeat(w0);
  const std::string hog = *jobs_->Submit(SmallSpec(3, 0));
  EXPECT_EQ(GetJob(hog).reason(), "held: needs 3 cpu workers; the fleet has 1 registered");
  const std::string w1 = AddWorker("host-b", 0);
  // Shown at once, stored no sooner than a heartbeat timeout after the last stored one.
  EXPECT_EQ(GetJob(hog).reason(), "held: needs 3 cpu workers; the fleet has 2 registered");
  EXPECT_EQ(GetJob(hog).transitions_size(), 2);
  now_ += std::chrono::seconds(11);
  Heartbeat(w0);
  Heartbeat(w1);
  jobs_->Tick();
  v1::Job job = GetJob(hog);
  EXPECT_EQ(job.reason(), "held: needs 3 cpu workers; the fleet has 2 registered");
  EXPECT_EQ(job.transitions_size(), 3);
  EXPECT_EQ(job.state(), v1::PENDING);
}

TEST_F(JobManagerTest, ABackfilledJobGivesItsWorkerBackWithoutSpendingARestart) {
  const std::string w0 = AddWorker("host-a", 0);
  const std::string w1 = AddWorker("host-b", 0);
  const std::string first = *jobs_->Submit(SmallSpec(1, 0));
  ASSERT_EQ(GetJob(first).worker_ids(0), w0);
  // The head needs both workers; the first job was not lent its worker, so the head waits.
  const std::string head = *jobs_->Submit(WithPriority(SmallSpec(2, 0), 5));
  EXPECT_EQ(GetJob(head).state(), v1::PENDING);
  // A lower job borrows the idle worker.
  const std::string lent = *jobs_->Submit(SmallSpec(1, /*max_restarts=*/0));
  v1::Job job = GetJob(lent);
  ASSERT_EQ(job.state(), v1::SCHEDULED);
  EXPECT_TRUE(job.backfilled());
  EXPECT_THAT(job.reason(), HasSubstr("backfilled"));
  EXPECT_THAT(job.reason(), HasSubstr(head));
  Step(w1, lent, 1, 0, 1, 5.0, 10);

  // The first job ends: the head could start if the lent worker came back, so the lent job is
  // preempted: cancelled on its worker, back to PENDING, no restart spent.
  Result(w0, first, 1, 0, true);
  job = GetJob(lent);
  EXPECT_EQ(job.state(), v1::PENDING);
  EXPECT_THAT(job.reason(), HasSubstr("preempted for " + head));
  EXPECT_EQ(job.preemptions(), 1);
  EXPECT_FALSE(job.backfilled());
  EXPECT_EQ(sessions_[w1]->Cancellations(), 1);
  // The freed worker is kept for the head while the lent one drains.
  EXPECT_EQ(StateOf(w0), v1::IDLE);
  EXPECT_EQ(GetJob(head).state(), v1::PENDING);
  Result(w1, lent, 1, 0, false, "", /*cancelled=*/true);
  job = GetJob(head);
  ASSERT_EQ(job.state(), v1::SCHEDULED);
  EXPECT_FALSE(job.backfilled());
  EXPECT_EQ(GetJob(lent).state(), v1::PENDING);

  // Once the head is done, the preempted job runs again: attempt 2, although max_restarts is 0.
  Result(w0, head, 1, 0, true);
  Result(w1, head, 1, 1, true);
  job = GetJob(lent);
  ASSERT_EQ(job.state(), v1::SCHEDULED);
  EXPECT_EQ(job.attempt(), 2);
  EXPECT_FALSE(job.backfilled());  // nothing waits: it was not lent anything this time
  const std::string worker = job.worker_ids(0);
  Result(worker, lent, 2, 0, true);
  EXPECT_EQ(GetJob(lent).state(), v1::SUCCEEDED);
}

TEST_F(JobManagerTest, AFailureAfterAPreemptionCountsOnlyTheFailedAttempts) {
  const std::string w0 = AddWorker("host-a", 0);
  const std::string w1 = AddWorker("host-b", 0);
  const std::string first = *jobs_->Submit(SmallSpec(1, 0));
  const std::string head = *jobs_->Submit(WithPriority(SmallSpec(2, 0), 5));
  const std::string lent = *jobs_->Submit(SmallSpec(1, /*max_restarts=*/1));
  Result(w0, first, 1, 0, true);
  Result(w1, lent, 1, 0, false, "", /*cancelled=*/true);
  Result(w0, head, 1, 0, true);
  Result(w1, head, 1, 1, true);
  ASSERT_EQ(GetJob(lent).attempt(), 2);
  const std::string worker = GetJob(lent).worker_ids(0);
  Result(worker, lent, 2, 0, false, "boom");
  // Two attempts ended, one of them preempted: one restart of max_restarts 1 is left, so the
  // job is retried (and placed again at once).
  v1::Job job = GetJob(lent);
  EXPECT_TRUE(HasReason(job, "boom (attempt 1 of 2 failed; retrying)")) << job.DebugString();
  EXPECT_EQ(job.state(), v1::SCHEDULED);
  EXPECT_EQ(job.attempt(), 3);
}

TEST_F(JobManagerTest, AnAttemptTheOomKillerEndedFailsSayingSoAndLowersTheWorkersMemory) {
  const std::string w0 = AddWorker("host-a", 0);
  now_ += std::chrono::seconds(11);
  Heartbeat(w0);
  const std::string id = *jobs_->Submit(SmallSpec(1, /*max_restarts=*/2));
  ASSERT_EQ(GetJob(id).state(), v1::SCHEDULED);
  const int64_t needed = static_cast<int64_t>(EstimateRankDeviceBytes(GetJob(id).spec()));

  // Another worker claiming the kill of an attempt it never ran changes nothing.
  const std::string w1 = AddWorker("host-b", 0, "", {}, 8 * kGiB);
  v1::RegisterRequest forged;
  forged.set_worker_id(w1);
  forged.set_hostname("host-b");
  forged.set_device_kind("cpu");
  forged.set_memory_bytes(8 * kGiB);
  forged.mutable_previous_oom_kill()->set_job_id(id);
  forged.mutable_previous_oom_kill()->set_attempt(1);
  jobs_->CloseSession(w1, sessions_[w1].get());
  ASSERT_TRUE(jobs_->RegisterWorker(forged).ok());
  EXPECT_EQ(GetJob(id).state(), v1::SCHEDULED);
  EXPECT_EQ(registry_->Find(w1)->info.memory_bytes(), 8 * kGiB);
  EXPECT_TRUE(registry_->Find(w1)->info.memory_note().empty());
  // It comes back claiming less than the job needs (the rest of the test wants no worker that
  // fits).
  forged.clear_previous_oom_kill();
  forged.set_memory_bytes(needed / 2);
  ASSERT_TRUE(jobs_->RegisterWorker(forged).ok());

  // The real worker's process was killed; its successor registers (no id) and says so.
  jobs_->CloseSession(w0, sessions_[w0].get());
  v1::RegisterRequest request;
  request.set_hostname("host-a");
  request.set_device_kind("cpu");
  request.set_memory_bytes(8 * kGiB);
  v1::OomKill* oom = request.mutable_previous_oom_kill();
  oom->set_job_id(id);
  oom->set_job_uid(GetJob(id).uid());
  oom->set_attempt(1);
  oom->set_rank(0);
  oom->set_cgroup("/sys/fs/cgroup/worker");
  oom->set_oom_kills_before(0);
  oom->set_oom_kills_after(1);
  absl::StatusOr<v1::RegisterResponse> registered = jobs_->RegisterWorker(request);
  ASSERT_TRUE(registered.ok()) << registered.status();
  ASSERT_EQ(registered->worker_id(), w0);
  v1::Job job = GetJob(id);
  EXPECT_TRUE(HasReason(job, "killed by the kernel's OOM killer"));
  const v1::Worker worker = registry_->Find(w0)->info;
  EXPECT_LT(worker.memory_bytes(), needed);
  EXPECT_EQ(worker.claimed_memory_bytes(), 8 * kGiB);
  EXPECT_THAT(worker.memory_note(), HasSubstr("OOM killer"));

  // The retry is not sent into the same wall: no worker with enough memory is left, so the job
  // is held saying so, and nothing is assigned to the worker.
  auto session = std::make_shared<FakeSession>();
  ASSERT_TRUE(jobs_->OpenSession(w0, session).ok());
  job = GetJob(id);
  EXPECT_EQ(job.state(), v1::RETRYING);
  EXPECT_THAT(job.reason(), HasSubstr("held: needs 1 cpu worker with at least"));
  EXPECT_THAT(job.reason(), HasSubstr("0 with that much"));
  EXPECT_TRUE(session->Assignments().empty());
  // The evidence stays with the worker when it registers again with its id.
  request.clear_previous_oom_kill();
  request.set_worker_id(w0);
  jobs_->CloseSession(w0, session.get());
  ASSERT_TRUE(jobs_->RegisterWorker(request).ok());
  EXPECT_LT(registry_->Find(w0)->info.memory_bytes(), needed);
}

// FP8 matmuls need FP8 tensor cores (compute capability 8.9): a worker that registered an older
// GPU takes no rank of such a job, which says what it waits for, and a newer worker takes it.
TEST_F(JobManagerTest, AnFp8JobGoesOnlyToAWorkerWhoseGpuHasFp8TensorCores) {
  const auto add_gpu = [&](const std::string& host, int compute_capability) {
    v1::RegisterRequest request;
    request.set_hostname(host);
    request.set_device_kind("cuda");
    request.set_gpu_compute_capability(compute_capability);
    request.set_memory_bytes(80 * kGiB);
    absl::StatusOr<v1::RegisterResponse> registered = jobs_->RegisterWorker(request);
    EXPECT_TRUE(registered.ok()) << registered.status();
    sessions_[registered->worker_id()] = std::make_shared<FakeSession>();
    EXPECT_TRUE(
        jobs_->OpenSession(registered->worker_id(), sessions_[registered->worker_id()]).ok());
    return registered->worker_id();
  };
  const std::string a100 = add_gpu("host-a", 80);
  EXPECT_EQ(registry_->Find(a100)->info.gpu_compute_capability(), 80);
  v1::JobSpec spec = SmallSpec(1, 0);
  spec.mutable_parallel()->set_device("cuda");
  spec.mutable_parallel()->set_param_dtype("bf16");
  spec.mutable_parallel()->set_matmul_dtype("fp8");
  absl::StatusOr<std::string> id = jobs_->Submit(spec);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(GetJob(*id).state(), v1::PENDING);
  EXPECT_THAT(GetJob(*id).reason(), HasSubstr("compute capability 8.9 or newer; the fleet has 1 "
                                              "registered, 0 that fit"));
  EXPECT_TRUE(sessions_[a100]->Assignments().empty());
  // The same job in bf16 runs on the A100.
  spec.mutable_parallel()->set_matmul_dtype("bf16");
  const std::string bf16 = *jobs_->Submit(spec);
  EXPECT_EQ(GetJob(bf16).state(), v1::SCHEDULED);

  const std::string h100 = add_gpu("host-b", 90);
  EXPECT_EQ(GetJob(*id).state(), v1::SCHEDULED);
  ASSERT_EQ(sessions_[h100]->Assignments().size(), 1u);
  EXPECT_EQ(sessions_[h100]->Assignments()[0].job_id(), *id);
}

// With a scheduling waker (the coordinator's ticker), Submit answers without running the pass
// over the fleet itself: it asks for one, and the pass places the job.
TEST_F(JobManagerTest, WithAWakerSubmitAsksForTheSchedulingPassInsteadOfRunningIt) {
  AddWorker("host-a", 0);
  AddWorker("host-a", 1);
  int wakes = 0;
  jobs_->SetSchedulingWaker([&wakes] { ++wakes; });
  const std::string id = *jobs_->Submit(SmallSpec(2, 0));
  EXPECT_EQ(wakes, 1);
  EXPECT_EQ(GetJob(id).state(), v1::PENDING) << "the pass ran inside Submit";
  jobs_->SchedulePass();
  EXPECT_EQ(GetJob(id).state(), v1::SCHEDULED);
  EXPECT_EQ(GetJob(id).worker_ids_size(), 2);
}

}  // namespace
}  // namespace fsdpd::server
