// The job state machine end to end: specs, the gang from submission to success, watches,
// heartbeats, retries, cancellation and job identities. Fixture: server_job_manager_fixture.h.
#include "tests/unit/server_job_manager_fixture.h"

namespace fsdpd::server {
namespace {

TEST_F(JobManagerTest, BadSpecsAreRejectedByFieldAndNothingIsStored) {
  v1::JobSpec spec = SmallSpec(2, 0);
  spec.mutable_model()->set_heads(3);  // 64 is not divisible by 3
  absl::StatusOr<std::string> id = jobs_->Submit(spec);
  ASSERT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(id.status().message()), HasSubstr("model."));

  id = jobs_->Submit(SmallSpec(16, 0));  // above max_world_size = 8
  ASSERT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(id.status().message()), HasSubstr("parallel.world_size"));

  // The one check at submission hands its field errors to the caller (the job service answers
  // them as BadRequest violations), the same ones a dry run's CheckSpec lists.
  std::vector<FieldError> errors;
  id = jobs_->Submit(SmallSpec(16, 0), "", &errors);
  ASSERT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].field, "parallel.world_size");
  EXPECT_THAT(errors[0].message, HasSubstr("--max-world-size"));
  EXPECT_EQ(FormatFieldErrors(errors), std::string(id.status().message()));
  const std::vector<FieldError> checked = jobs_->CheckSpec(SmallSpec(16, 0));
  ASSERT_EQ(checked.size(), 1u);
  EXPECT_EQ(checked[0].message, errors[0].message);

  AddWorker("small-host", 0, "", {}, /*memory=*/1024);
  id = jobs_->Submit(SmallSpec(1, 0));
  ASSERT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(id.status().message()), HasSubstr("parallel.device"));
  EXPECT_THAT(std::string(id.status().message()), HasSubstr("memory"));

  EXPECT_TRUE(jobs_->List({}, 0).empty());
  EXPECT_TRUE(store_->LoadJobs()->empty());
}

TEST_F(JobManagerTest, GangRunsToSuccessWithAggregatedSteps) {
  const std::string w0 = AddWorker("host-a", 0);
  const std::string w1 = AddWorker("host-a", 1);
  const std::string id = *jobs_->Submit(SmallSpec(2, 0));
  EXPECT_EQ(id, "job-000001");

  v1::Job job = GetJob(id);
  EXPECT_EQ(job.state(), v1::SCHEDULED);
  EXPECT_EQ(job.attempt(), 1);
  ASSERT_EQ(job.worker_ids_size(), 2);
  EXPECT_EQ(job.worker_ids(0), w0);
  ASSERT_EQ(sessions_[w0]->Assignments().size(), 1u);
  const v1::Assignment assignment = sessions_[w1]->Assignments().front();
  EXPECT_EQ(assignment.rank(), 1);
  EXPECT_EQ(assignment.world_size(), 2);
  EXPECT_EQ(assignment.rendezvous_scope(), id + "/1");
  EXPECT_EQ(assignment.spec().name(), "tiny");
  EXPECT_TRUE(rendezvous_->HasScope(id, 1));
  EXPECT_EQ(StateOf(w0), v1::BUSY);

  auto watcher = std::make_shared<FakeSubscriber>();
  ASSERT_TRUE(jobs_->Watch(id, watcher).ok());

  Step(w0, id, 1, 0, 1, 5.5, 100, 1000, /*memory_reserved=*/4000);
  EXPECT_EQ(GetJob(id).state(), v1::RUNNING);
  EXPECT_EQ(GetJob(id).step(), 0);  // rank 1 has not reported step 1 yet
  Step(w1, id, 1, 1, 1, 9.9, 150, 3000, /*memory_reserved=*/3500);
  job = GetJob(id);
  EXPECT_EQ(job.step(), 1);
  EXPECT_DOUBLE_EQ(job.loss(), 5.5);               // rank 0's (already all-reduced) loss
  EXPECT_DOUBLE_EQ(job.tokens_per_second(), 250);  // summed over ranks

  Result(w0, id, 1, 0, true);
  EXPECT_EQ(GetJob(id).state(), v1::RUNNING);
  Result(w1, id, 1, 1, true);
  job = GetJob(id);
  EXPECT_EQ(job.state(), v1::SUCCEEDED);
  EXPECT_GT(job.finished_unix_millis(), 0);
  EXPECT_EQ(StateOf(w0), v1::IDLE);
  EXPECT_EQ(StateOf(w1), v1::IDLE);
  EXPECT_FALSE(rendezvous_->HasScope(id, 1));

  std::vector<v1::JobState> states;
  for (const v1::StateChange& change : job.transitions()) {
    states.push_back(change.state());
    EXPECT_FALSE(change.reason().empty());
    EXPECT_GT(change.unix_millis(), 0);
  }
  EXPECT_THAT(states,
              ::testing::ElementsAre(v1::PENDING, v1::SCHEDULED, v1::RUNNING, v1::SUCCEEDED));

  // The watcher saw RUNNING, one aggregated step with the max memory (each figure its own
  // maximum over the ranks), then SUCCEEDED and end.
  ASSERT_EQ(watcher->events.size(), 3u);
  EXPECT_EQ(watcher->events[0].state().state(), v1::RUNNING);
  EXPECT_EQ(watcher->events[1].step().memory_peak_bytes(), 3000);
  EXPECT_EQ(watcher->events[1].step().memory_reserved_bytes(), 4000);
  EXPECT_EQ(watcher->events[2].state().state(), v1::SUCCEEDED);
  ASSERT_TRUE(watcher->ended.has_value());
  EXPECT_TRUE(watcher->ended->ok());

  // A later watcher gets the same history from the store, in order, and no subscription.
  auto late = std::make_shared<FakeSubscriber>();
  absl::StatusOr<JobManager::History> history = jobs_->Watch(id, late);
  ASSERT_TRUE(history.ok());
  EXPECT_TRUE(history->ended);
  ASSERT_EQ(history->events.size(), 5u);
  EXPECT_EQ(history->events[0].state().state(), v1::PENDING);
  EXPECT_TRUE(history->events[3].has_step());
  EXPECT_EQ(history->events[4].state().state(), v1::SUCCEEDED);
}

// A watch replays every state change but only the newest --watch-replay-steps steps (its
// history is read under the manager's lock), then follows live; a restart resumes the
// sequence after the last stored event.
TEST_F(JobManagerTest, AWatchReplaysOnlyTheNewestSteps) {
  watch_replay_steps_ = 3;
  Restart();
  const std::string w0 = AddWorker("host-a", 0);
  const std::string id = *jobs_->Submit(SmallSpec(1, 0));
  for (int step = 1; step <= 8; ++step) Step(w0, id, 1, 0, step, 1.0, 100);
  absl::StatusOr<JobManager::History> history = jobs_->Watch(id, nullptr);
  ASSERT_TRUE(history.ok()) << history.status();
  std::vector<int64_t> steps;
  std::vector<v1::JobState> states;
  for (const v1::JobEvent& event : history->events) {
    if (event.has_step()) {
      steps.push_back(event.step().step());
    } else {
      states.push_back(event.state().state());
    }
  }
  EXPECT_EQ(steps, (std::vector<int64_t>{6, 7, 8}));
  EXPECT_EQ(states, (std::vector<v1::JobState>{v1::PENDING, v1::SCHEDULED, v1::RUNNING}));

  Restart();  // the next event's sequence follows the last stored one
  auto watcher = std::make_shared<FakeSubscriber>();
  ASSERT_TRUE(jobs_->Watch(id, watcher).ok());
  const std::string again = AddWorker("host-a", 0, w0, RankAssignment{id, 1, 0});
  Step(again, id, 1, 0, 9, 1.0, 100);
  absl::StatusOr<JobManager::History> after = jobs_->Watch(id, nullptr);
  ASSERT_TRUE(after.ok()) << after.status();
  ASSERT_FALSE(after->events.empty());
  EXPECT_EQ(after->events.back().step().step(), 9);
  const absl::StatusOr<std::vector<StoredEvent>> stored = store_->LoadEvents(id);
  ASSERT_TRUE(stored.ok()) << stored.status();
  int64_t sequence = 0;
  for (const StoredEvent& event : *stored) {
    EXPECT_GT(event.sequence, sequence) << "sequences stay unique and increasing";
    sequence = event.sequence;
  }
}

// A worker learns which of its step reports are stored, so it can forget them; until then it
// keeps them to send again after a coordinator restart.
TEST_F(JobManagerTest, HeartbeatAcksConfirmStoredReportsOnly) {
  const std::string w0 = AddWorker("host-a", 0);
  const std::string w1 = AddWorker("host-a", 1);
  const std::string id = *jobs_->Submit(SmallSpec(2, 0));
  for (int step = 1; step <= 3; ++step) {
    Step(w0, id, 1, 0, step, 5.0, 100);
    Step(w1, id, 1, 1, step, 5.0, 100);
  }
  // Buffered, not yet written (batch_rows is larger): nothing is confirmed.
  size_t seen = sessions_[w0]->messages.size();
  Heartbeat(w0);
  EXPECT_TRUE(Confirmations(*sessions_[w0], seen).empty());

  ASSERT_TRUE(store_->Flush().ok());
  seen = sessions_[w0]->messages.size();
  Heartbeat(w0);
  std::vector<v1::ReportsStored> stored = Confirmations(*sessions_[w0], seen);
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_EQ(stored[0].job_id(), id);
  EXPECT_EQ(stored[0].attempt(), 1);
  EXPECT_EQ(stored[0].through_step(), 3);
  // Confirmed once: the next ack carries nothing for them.
  seen = sessions_[w0]->messages.size();
  Heartbeat(w0);
  EXPECT_TRUE(Confirmations(*sessions_[w0], seen).empty());

  // A resent report is stored again (idempotent) and confirmed again; one for an attempt that
  // is not running is not stored, and is confirmed so the worker drops it.
  Step(w0, id, 1, 0, 2, 5.0, 100);
  Step(w0, id, 7, 0, 9, 5.0, 100);
  ASSERT_TRUE(store_->Flush().ok());
  seen = sessions_[w0]->messages.size();
  Heartbeat(w0);
  stored = Confirmations(*sessions_[w0], seen);
  ASSERT_EQ(stored.size(), 2u);
  EXPECT_EQ(stored[0].attempt(), 1);
  EXPECT_EQ(stored[0].through_step(), 2);
  EXPECT_EQ(stored[1].attempt(), 7);
  EXPECT_EQ(stored[1].through_step(), 9);
  absl::StatusOr<std::vector<v1::StepReport>> rows = store_->LoadStepReports(id);
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(rows->size(), 6u) << "one row per rank and step, however often it arrived";

  // The other worker's reports are confirmed on its own acks.
  seen = sessions_[w1]->messages.size();
  Heartbeat(w1);
  stored = Confirmations(*sessions_[w1], seen);
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_EQ(stored[0].through_step(), 3);
}

// What a watcher is told is already what Get says: events of a run of worker messages reach
// subscribers only once the run is committed and published.
TEST_F(JobManagerTest, WatchersHearOfAChangeOnlyOnceGetShowsIt) {
  class GetOnEnd : public FakeSubscriber {
   public:
    GetOnEnd(JobManager& jobs, std::string id) : jobs_(jobs), id_(std::move(id)) {}
    void OnEvent(const v1::JobEvent& event) override {
      FakeSubscriber::OnEvent(event);
      if (event.has_state()) seen_by_get.push_back(jobs_.Get(id_)->state());
    }
    std::vector<v1::JobState> seen_by_get;

   private:
    JobManager& jobs_;
    std::string id_;
  };
  const std::string w0 = AddWorker("host-a", 0);
  const std::string id = *jobs_->Submit(SmallSpec(1, 0));
  auto watcher = std::make_shared<GetOnEnd>(*jobs_, id);
  ASSERT_TRUE(jobs_->Watch(id, watcher).ok());
  Step(w0, id, 1, 0, 1, 5.0, 100);
  Result(w0, id, 1, 0, true);
  ASSERT_EQ(watcher->events.size(), 3u);
  EXPECT_EQ(watcher->events[2].state().state(), v1::SUCCEEDED);
  EXPECT_THAT(watcher->seen_by_get, ::testing::ElementsAre(v1::RUNNING, v1::SUCCEEDED));
}

TEST_F(JobManagerTest, RankErrorRetriesAndFailsAfterMaxRestarts) {
  const std::string w0 = AddWorker("host-a", 0);
  const std::string w1 = AddWorker("host-a", 1);
  const std::string id = *jobs_->Submit(SmallSpec(2, /*max_restarts=*/1));
  Step(w0, id, 1, 0, 1, 5.0, 10);

  Result(w1, id, 1, 1, false, "out of memory in layer 3");
  v1::Job job = GetJob(id);
  EXPECT_EQ(job.state(), v1::RETRYING);
  EXPECT_THAT(job.reason(), HasSubstr("out of memory in layer 3"));
  EXPECT_EQ(sessions_[w0]->Cancellations(), 1);
  // Rank 0 is busy until it confirms the cancellation; then attempt 2 starts on both.
  EXPECT_EQ(StateOf(w0), v1::BUSY);
  EXPECT_FALSE(rendezvous_->HasScope(id, 1));
  Result(w0, id, 1, 0, false, "", /*cancelled=*/true);
  job = GetJob(id);
  EXPECT_EQ(job.state(), v1::SCHEDULED);
  EXPECT_EQ(job.attempt(), 2);
  EXPECT_EQ(sessions_[w0]->Assignments().back().attempt(), 2);

  Result(w0, id, 2, 0, false, "NaN loss at step 4");
  job = GetJob(id);
  EXPECT_EQ(job.state(), v1::FAILED);
  EXPECT_THAT(job.reason(), HasSubstr("NaN loss at step 4"));
}

// Rank 0's model upload is bounded by what the spec's model can take in fp32, and a job has no
// other artifact: a larger upload (a rogue or broken worker, or a sparse write far past the end)
// or another file name fails the attempt with the reason, and nothing of it stays on disk.
TEST_F(JobManagerTest, AModelUploadLargerThanTheSpecAllowsFailsTheAttempt) {
  const std::string w0 = AddWorker("host-a", 0);
  const v1::JobSpec spec = SmallSpec(1, /*max_restarts=*/3);
  const std::string id = *jobs_->Submit(spec);
  const int64_t limit = ExportedModelBytesLimit(GetJob(id).spec().model());
  ASSERT_GT(limit, 4 * ParameterCount(spec.model()));
  const std::string artifact_dir = directory_ + "/artifacts/" + id;
  auto upload = [&](int attempt, int64_t offset, int64_t size, bool last,
                    const std::string& name = "model.safetensors") {
    v1::WorkerMessage message;
    v1::ArtifactChunk* chunk = message.mutable_artifact();
    chunk->set_job_id(id);
    chunk->set_attempt(attempt);
    chunk->set_name(name);
    chunk->mutable_chunk()->set_offset(offset);
    chunk->mutable_chunk()->set_data(std::string(static_cast<size_t>(size), 'w'));
    chunk->set_last(last);
    jobs_->OnWorkerMessage(w0, message);
  };
  auto expect_refused = [&](int attempt, const std::string& why) {
    const v1::Job job = GetJob(id);
    EXPECT_EQ(job.state(), v1::RETRYING);
    EXPECT_EQ(job.attempt(), attempt);
    EXPECT_THAT(job.reason(), HasSubstr("model upload failed"));
    EXPECT_THAT(job.reason(), HasSubstr(why));
    EXPECT_FALSE(std::filesystem::exists(artifact_dir + "/model.safetensors.partial"));
    EXPECT_FALSE(std::filesystem::exists(artifact_dir + "/model.safetensors"));
    EXPECT_EQ(sessions_[w0]->Cancellations(), attempt);
    Result(w0, id, attempt, 0, false, "", /*cancelled=*/true);
  };

  // A chunk that ends 90 bytes past the limit.
  upload(1, 0, 1000, false);
  EXPECT_TRUE(std::filesystem::exists(artifact_dir + "/model.safetensors.partial"));
  upload(1, limit - 10, 100, false);
  expect_refused(1, absl::StrCat("past the ", limit, " bytes"));
  // A chunk far out, where offset + size would overflow: refused, not a sparse file.
  upload(2, std::numeric_limits<int64_t>::max() - 10, 100, false);
  expect_refused(2, absl::StrCat("past the ", limit, " bytes"));
  // Another file beside the model.
  upload(3, 0, 100, true, "notes.txt");
  expect_refused(3, "is neither model.safetensors");
  EXPECT_FALSE(std::filesystem::exists(artifact_dir + "/notes.txt"));

  // The next attempt uploads a model exactly at the limit, which is stored.
  ASSERT_EQ(GetJob(id).attempt(), 4);
  upload(4, 0, limit, true);
  Result(w0, id, 4, 0, true);
  EXPECT_EQ(GetJob(id).state(), v1::SUCCEEDED);
  EXPECT_EQ(static_cast<int64_t>(std::filesystem::file_size(artifact_dir + "/model.safetensors")),
            limit);
}

TEST_F(JobManagerTest, CancelStopsRanksAndFreesWorkersWhenTheyReport) {
  const std::string w0 = AddWorker("host-a", 0);
  const std::string pending_id = *jobs_->Submit(SmallSpec(2, 0));  // cannot be placed yet
  EXPECT_EQ(GetJob(pending_id).state(), v1::PENDING);
  absl::StatusOr<v1::Job> cancelled = jobs_->Cancel(pending_id, "");
  ASSERT_TRUE(cancelled.ok());
  EXPECT_EQ(cancelled->state(), v1::CANCELLED);

  const std::string id = *jobs_->Submit(SmallSpec(1, 3));
  EXPECT_EQ(GetJob(id).state(), v1::SCHEDULED);
  cancelled = jobs_->Cancel(id, "wrong learning rate");
  ASSERT_TRUE(cancelled.ok());
  EXPECT_EQ(cancelled->state(), v1::CANCELLED);
  EXPECT_EQ(cancelled->reason(), "wrong learning rate");
  EXPECT_EQ(sessions_[w0]->Cancellations(), 1);
  EXPECT_EQ(StateOf(w0), v1::BUSY);
  Result(w0, id, 1, 0, false, "", true);
  EXPECT_EQ(StateOf(w0), v1::IDLE);
  EXPECT_EQ(GetJob(id).state(), v1::CANCELLED);  // a late result changes nothing

  EXPECT_EQ(jobs_->Cancel("job-999999", "").status().code(), absl::StatusCode::kNotFound);
}

// Issue 11 §1: a job's unique id survives restarts and differs between state folders.
TEST_F(JobManagerTest, JobsHaveUniqueIdsThatAssignmentsCarryAndRestartsKeep) {
  const std::string w0 = AddWorker("host-a", 0);
  const std::string id = *jobs_->Submit(SmallSpec(1, 0));
  const std::string uid = GetJob(id).uid();
  EXPECT_EQ(uid.size(), 36u) << uid;
  EXPECT_EQ(sessions_[w0]->Assignments().front().job_uid(), uid);
  const std::string second = *jobs_->Submit(SmallSpec(1, 0));
  EXPECT_NE(GetJob(second).uid(), uid);
  Restart();
  EXPECT_EQ(GetJob(id).uid(), uid);

  // A new state folder starts again at job-000001, under a new unique id.
  Stop();
  std::filesystem::remove_all(directory_);
  std::filesystem::create_directories(directory_);
  Start();
  const std::string again = *jobs_->Submit(SmallSpec(1, 0));
  EXPECT_EQ(again, id);
  EXPECT_NE(GetJob(again).uid(), uid);
}

// A worker that outlived an older coordinator may still send reports of the older job with the
// same display id: they do not count for the new one.
TEST_F(JobManagerTest, ReportsOfAnOlderJobWithTheSameDisplayIdAreIgnored) {
  const std::string w0 = AddWorker("host-a", 0);
  const std::string id = *jobs_->Submit(SmallSpec(1, 0));
  v1::WorkerMessage message;
  v1::AttemptResult* result = message.mutable_result();
  result->set_job_id(id);
  result->set_job_uid("0c1d7a52-0000-4000-8000-000000000000");
  result->set_attempt(1);
  result->set_ok(true);
  result->set_final_step(400);
  jobs_->OnWorkerMessage(w0, message);
  EXPECT_EQ(GetJob(id).state(), v1::SCHEDULED) << GetJob(id).reason();
  result->set_job_uid(GetJob(id).uid());
  jobs_->OnWorkerMessage(w0, message);
  EXPECT_EQ(GetJob(id).state(), v1::SUCCEEDED);
}

// SCHEDULED has a deadline: a rank that never accepts fails the attempt, which is retried.
TEST_F(JobManagerTest, AttemptWhoseRanksDoNotAcceptInTimeFailsAndRetries) {
  const std::string w0 = AddWorker("host-a", 0);
  const std::string w1 = AddWorker("host-a", 1);
  const std::string id = *jobs_->Submit(SmallSpec(2, 1));
  const std::string uid = GetJob(id).uid();
  v1::WorkerMessage message;
  v1::AssignmentAccepted* accepted = message.mutable_accepted();
  accepted->set_job_id(id);
  accepted->set_job_uid(uid);
  accepted->set_attempt(1);
  accepted->set_rank(0);
  jobs_->OnWorkerMessage(w0, message);
  // Both keep beating, so neither is lost; only rank 1's acceptance is missing.
  const auto timeout =
      WorkerRegistryConfig{}.heartbeat_timeout + RendezvousConfig{}.default_get_timeout;
  for (auto waited = std::chrono::milliseconds(0); waited < timeout;
       waited += std::chrono::seconds(5)) {
    EXPECT_EQ(GetJob(id).state(), v1::SCHEDULED);
    now_ += std::chrono::seconds(5);
    Heartbeat(w0);
    Heartbeat(w1);
    jobs_->Tick();
  }
  v1::Job job = GetJob(id);
  EXPECT_EQ(job.state(), v1::RETRYING);
  EXPECT_THAT(job.reason(), HasSubstr("rank 1 (worker " + w1 + ") did not accept"));
  Result(w0, id, 1, 0, false, "", true);
  Result(w1, id, 1, 1, false, "", true);
  EXPECT_EQ(GetJob(id).attempt(), 2);
  EXPECT_EQ(GetJob(id).state(), v1::SCHEDULED);
  // Acceptance by every rank moves the deadline on; the first step ends it
  // (server_worker_health_test.cc covers an attempt that hangs after accepting).
  accepted->set_attempt(2);
  jobs_->OnWorkerMessage(w0, message);
  accepted->set_rank(1);
  jobs_->OnWorkerMessage(w1, message);
  Step(w0, id, 2, 0, 1, 4.0, 100);
  EXPECT_EQ(GetJob(id).state(), v1::RUNNING);
  now_ += timeout * 2;
  Heartbeat(w0);
  Heartbeat(w1);
  jobs_->Tick();
  EXPECT_EQ(GetJob(id).state(), v1::RUNNING);
}

// Issue 11 §3: bad input fails at once; a crash is retried.
TEST_F(JobManagerTest, PermanentFailureIsNotRetried) {
  const std::string w0 = AddWorker("host-a", 0);
  const std::string id = *jobs_->Submit(SmallSpec(1, 3));
  v1::WorkerMessage message;
  v1::AttemptResult* result = message.mutable_result();
  result->set_job_id(id);
  result->set_attempt(1);
  result->set_error("data.path: /data/missing.bin: no such file");
  result->set_permanent(true);
  jobs_->OnWorkerMessage(w0, message);
  v1::Job job = GetJob(id);
  EXPECT_EQ(job.state(), v1::FAILED);
  EXPECT_EQ(job.attempt(), 1);
  EXPECT_THAT(job.reason(), HasSubstr("missing.bin"));
  EXPECT_THAT(job.reason(), HasSubstr("not retried"));

  const std::string crashed = *jobs_->Submit(SmallSpec(1, 3));
  Result(w0, crashed, 1, 0, false, "the trainer threw: bad_alloc");
  EXPECT_EQ(GetJob(crashed).state(), v1::SCHEDULED);
  EXPECT_EQ(GetJob(crashed).attempt(), 2);
}

}  // namespace
}  // namespace fsdpd::server
