// The job manager through failures: silent and lost workers, a restarted coordinator, workers
// that reconnect, stale work, shutdown and a store that cannot write. Fixture:
// server_job_manager_fixture.h.
#include "tests/unit/server_job_manager_fixture.h"

namespace fsdpd::server {
namespace {

TEST_F(JobManagerTest, SilentWorkerIsLostAndItsAttemptRetries) {
  const std::string w0 = AddWorker("host-a", 0);
  const std::string w1 = AddWorker("host-b", 0);
  const std::string id = *jobs_->Submit(SmallSpec(2, 2));
  Step(w0, id, 1, 0, 1, 5.0, 10);

  now_ += std::chrono::seconds(6);
  Heartbeat(w0);
  jobs_->Tick();
  EXPECT_EQ(GetJob(id).state(), v1::RUNNING);  // within the 10 s timeout
  now_ += std::chrono::seconds(6);
  Heartbeat(w0);
  jobs_->Tick();
  EXPECT_EQ(StateOf(w1), v1::LOST);
  v1::Job job = GetJob(id);
  EXPECT_EQ(job.state(), v1::RETRYING);
  EXPECT_THAT(job.reason(), HasSubstr("worker " + w1 + " lost"));
  EXPECT_EQ(sessions_[w0]->Cancellations(), 1);
}

TEST_F(JobManagerTest, RunningAttemptSurvivesACoordinatorRestartWhenAllRanksReturn) {
  std::string w0 = AddWorker("host-a", 0);
  std::string w1 = AddWorker("host-a", 1);
  const std::string id = *jobs_->Submit(SmallSpec(2, 0));
  Step(w0, id, 1, 0, 1, 5.0, 10);
  Step(w1, id, 1, 1, 1, 5.0, 10);
  Restart();

  EXPECT_EQ(GetJob(id).state(), v1::RUNNING);
  EXPECT_EQ(GetJob(id).step(), 1);
  AddWorker("host-a", 0, w0, {id, 1, 0});
  AddWorker("host-a", 1, w1, {id, 1, 1});
  EXPECT_EQ(StateOf(w0), v1::BUSY);
  now_ += std::chrono::seconds(11);
  Heartbeat(w0);
  Heartbeat(w1);
  jobs_->Tick();
  EXPECT_EQ(GetJob(id).state(), v1::RUNNING);
  Step(w0, id, 1, 0, 2, 4.0, 10);
  Step(w1, id, 1, 1, 2, 4.0, 10);
  EXPECT_EQ(GetJob(id).step(), 2);
  Result(w0, id, 1, 0, true);
  Result(w1, id, 1, 1, true);
  EXPECT_EQ(GetJob(id).state(), v1::SUCCEEDED);
}

TEST_F(JobManagerTest, AttemptFailsWhenARankDoesNotReturnAfterRestart) {
  std::string w0 = AddWorker("host-a", 0);
  std::string w1 = AddWorker("host-a", 1);
  const std::string id = *jobs_->Submit(SmallSpec(2, 1));
  Step(w0, id, 1, 0, 1, 5.0, 10);
  Restart();

  AddWorker("host-a", 0, w0, {id, 1, 0});
  now_ += std::chrono::seconds(5);
  jobs_->Tick();
  EXPECT_EQ(GetJob(id).state(), v1::RUNNING);
  now_ += std::chrono::seconds(6);
  Heartbeat(w0);
  jobs_->Tick();
  v1::Job job = GetJob(id);
  EXPECT_EQ(job.state(), v1::RETRYING);
  EXPECT_THAT(job.transitions(),
              ::testing::Contains(::testing::Property(&v1::StateChange::reason, HasSubstr(w1))));
  // The worker never registered with this coordinator: the retry waits, held, saying why.
  EXPECT_EQ(job.reason(), "held: needs 2 cpu workers; the fleet has 1 registered");
  EXPECT_EQ(sessions_[w0]->Cancellations(), 1);
}

TEST_F(JobManagerTest, RankThatFinishedWhileTheCoordinatorWasAwayCountsAsBack) {
  std::string w0 = AddWorker("host-a", 0);
  std::string w1 = AddWorker("host-a", 1);
  const std::string id = *jobs_->Submit(SmallSpec(2, 0));
  Step(w0, id, 1, 0, 1, 5.0, 10);
  Restart();

  AddWorker("host-a", 0, w0, {id, 1, 0});
  AddWorker("host-a", 1, w1);  // its rank ended; it delivers the buffered result
  Result(w1, id, 1, 1, true);
  now_ += std::chrono::seconds(11);
  Heartbeat(w0);
  Heartbeat(w1);
  jobs_->Tick();
  EXPECT_EQ(GetJob(id).state(), v1::RUNNING);
  Result(w0, id, 1, 0, true);
  EXPECT_EQ(GetJob(id).state(), v1::SUCCEEDED);
}

TEST_F(JobManagerTest, LostWorkersAreForgottenAfterTheRetention) {
  const std::string w0 = AddWorker("host-a", 0);
  jobs_->CloseSession(w0, sessions_[w0].get());
  now_ += std::chrono::seconds(11);
  jobs_->Tick();
  EXPECT_EQ(StateOf(w0), v1::LOST);
  now_ += std::chrono::minutes(30);
  jobs_->Tick();
  EXPECT_TRUE(registry_->Find(w0).has_value());  // alerts still see it
  now_ += std::chrono::hours(2);
  jobs_->Tick();
  EXPECT_FALSE(registry_->Find(w0).has_value());
}

TEST_F(JobManagerTest, WorkerThatReconnectsInTimeKeepsItsRank) {
  const std::string w0 = AddWorker("host-a", 0);
  const std::string w1 = AddWorker("host-a", 1);
  const std::string id = *jobs_->Submit(SmallSpec(2, 1));
  Step(w0, id, 1, 0, 1, 5.0, 10);

  // w0's stream breaks; it comes back within the timeout, still running rank 0.
  jobs_->CloseSession(w0, sessions_[w0].get());
  now_ += std::chrono::seconds(4);
  Heartbeat(w1);
  jobs_->Tick();
  AddWorker("host-a", 0, w0, {id, 1, 0});
  now_ += std::chrono::seconds(8);
  Heartbeat(w0);
  Heartbeat(w1);
  jobs_->Tick();
  EXPECT_EQ(GetJob(id).state(), v1::RUNNING);
  EXPECT_EQ(StateOf(w0), v1::BUSY);

  // w1's process restarts (its stream ends with it) and registers with nothing running: its
  // rank is gone. While its old session was live the id could not have been registered again.
  jobs_->CloseSession(w1, sessions_[w1].get());
  AddWorker("host-a", 1, w1);
  v1::Job job = GetJob(id);
  EXPECT_EQ(job.state(), v1::RETRYING);
  EXPECT_THAT(job.reason(), HasSubstr("restarted"));
}

TEST_F(JobManagerTest, WorkStaleAtRegistrationIsCancelledAndTheWorkerFreedAfterward) {
  const std::string id = *jobs_->Submit(SmallSpec(1, 0));
  ASSERT_TRUE(jobs_->Cancel(id, "").ok());
  // A worker comes back still running attempt 1 of a job that has since ended.
  const std::string worker = AddWorker("host-a", 0, "worker-stale", {id, 1, 0});
  EXPECT_EQ(sessions_[worker]->Cancellations(), 1);
  EXPECT_EQ(StateOf(worker), v1::BUSY);
  const std::string next = *jobs_->Submit(SmallSpec(1, 0));
  EXPECT_EQ(GetJob(next).state(), v1::PENDING);  // the worker is not free yet
  Result(worker, id, 1, 0, false, "", true);
  EXPECT_EQ(StateOf(worker), v1::BUSY);  // and now runs the next job
  EXPECT_EQ(GetJob(next).state(), v1::SCHEDULED);
}

TEST_F(JobManagerTest, ShutdownFlushesAndClosesWithoutTouchingJobs) {
  const std::string w0 = AddWorker("host-a", 0);
  const std::string id = *jobs_->Submit(SmallSpec(1, 0));
  Step(w0, id, 1, 0, 1, 5.0, 10);
  v1::WorkerMessage message;
  message.mutable_log()->set_job_id(id);
  message.mutable_log()->set_text("buffered line");
  jobs_->OnWorkerMessage(w0, message);
  auto watcher = std::make_shared<FakeSubscriber>();
  ASSERT_TRUE(jobs_->Watch(id, watcher).ok());

  jobs_->Shutdown();
  ASSERT_TRUE(sessions_[w0]->closed.has_value());
  EXPECT_EQ(sessions_[w0]->closed->code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(sessions_[w0]->Cancellations(), 0);
  ASSERT_TRUE(watcher->ended.has_value());
  EXPECT_EQ(watcher->ended->code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(GetJob(id).state(), v1::RUNNING);
  EXPECT_EQ(jobs_->Submit(SmallSpec(1, 0)).status().code(), absl::StatusCode::kUnavailable);

  // Another connection (a later coordinator) sees the buffered rows.
  JobStoreConfig config;
  config.database_path = directory_ + "/fsdpd.db";
  std::unique_ptr<SqliteJobStore> reader = std::move(*SqliteJobStore::Open(config));
  EXPECT_EQ(reader->LoadLogs(id, 0)->size(), 1u);
  EXPECT_EQ(reader->LoadStepReports(id)->size(), 1u);
  EXPECT_EQ(reader->LoadJobs()->front().state(), v1::RUNNING);
}

// Issue 11 §2: a store that cannot write (SQLITE_FULL, injected with PRAGMA max_page_count)
// never splits memory from disk. What failed is held, submits get UNAVAILABLE, and once space
// is back the held reports are stored in order and the history is whole, with no restart.
TEST_F(JobManagerTest, FullStoreHoldsChangesUntilItWritesAgainAndLosesNothing) {
  const std::string w0 = AddWorker("host-a", 0);
  const std::string id = *jobs_->Submit(SmallSpec(1, 0));
  Step(w0, id, 1, 0, 1, 5.0, 10);
  ASSERT_TRUE(jobs_->GetStoreHealth().writable);

  FreezeStoreSize();
  int step = 1;
  while (jobs_->GetStoreHealth().writable && step < 2000) {
    ++step;
    Step(w0, id, 1, 0, step, 5.0 - step * 0.001, 10);
  }
  ASSERT_FALSE(jobs_->GetStoreHealth().writable) << "the page limit never made a write fail";
  const int64_t stored_step = GetJob(id).step();
  EXPECT_EQ(stored_step, step - 1) << "the step whose write failed is not shown";
  for (int more = 0; more < 5; ++more) Step(w0, id, 1, 0, ++step, 4.0, 10);
  Result(w0, id, 1, 0, true);
  jobs_->Tick();  // still full: nothing moves
  const JobManager::StoreHealth failing = jobs_->GetStoreHealth();
  EXPECT_FALSE(failing.writable);
  EXPECT_GE(failing.errors, 1);
  EXPECT_GT(failing.held_messages, 0);
  EXPECT_FALSE(failing.last_error.empty());
  v1::Job job = GetJob(id);
  EXPECT_EQ(job.state(), v1::RUNNING) << "SUCCEEDED was not stored, so it is not shown";
  EXPECT_EQ(job.step(), stored_step);
  absl::StatusOr<std::string> refused = jobs_->Submit(SmallSpec(1, 0));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable) << refused.status();
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("job store cannot write"));
  EXPECT_EQ(jobs_->Cancel(id, "").status().code(), absl::StatusCode::kUnavailable);
  absl::StatusOr<std::vector<StoredEvent>> events = store_->LoadEvents(id);
  ASSERT_TRUE(events.ok()) << events.status();
  EXPECT_EQ(events->back().event.step().step(), stored_step) << "memory matches the disk";

  ASSERT_TRUE(store_->LimitPages(int64_t{1} << 30).ok());
  jobs_->Tick();
  EXPECT_TRUE(jobs_->GetStoreHealth().writable);
  EXPECT_EQ(jobs_->GetStoreHealth().held_messages, 0);
  job = GetJob(id);
  EXPECT_EQ(job.state(), v1::SUCCEEDED) << job.reason();
  EXPECT_EQ(job.step(), step);
  EXPECT_EQ(job.attempt(), 1);
  // The history is whole: every step once, in order, then SUCCEEDED.
  events = store_->LoadEvents(id);
  ASSERT_TRUE(events.ok()) << events.status();
  const std::vector<int64_t> steps = StepsOf(*events);
  ASSERT_EQ(steps.size(), static_cast<size_t>(step));
  for (int i = 0; i < step; ++i) EXPECT_EQ(steps[i], i + 1);
  EXPECT_EQ(events->back().event.state().state(), v1::SUCCEEDED);
  Restart();
  EXPECT_EQ(GetJob(id).state(), v1::SUCCEEDED);
  EXPECT_EQ(GetJob(id).attempt(), 1);
  EXPECT_TRUE(jobs_->Submit(SmallSpec(1, 0)).ok());
}

// A run whose commit fails is undone whole: reports that only counted toward their step (undone
// entry by entry) as well as the one that completed it (undone by a snapshot of the record).
// Replayed once the store writes again, the step is aggregated exactly once.
TEST_F(JobManagerTest, AFailedRunOfPartialStepReportsIsUndoneAndReplayedOnce) {
  const std::vector<std::string> workers = {AddWorker("host-a", 0), AddWorker("host-a", 1),
                                            AddWorker("host-a", 2)};
  const std::string id = *jobs_->Submit(SmallSpec(3, 0));
  v1::Job job = GetJob(id);
  ASSERT_EQ(job.state(), v1::SCHEDULED);
  std::vector<std::string> by_rank(job.worker_ids().begin(), job.worker_ids().end());
  for (int rank = 0; rank < 3; ++rank) Step(by_rank[rank], id, 1, rank, 1, 5.0, 10);
  ASSERT_EQ(GetJob(id).step(), 1);

  // Runs of one step each: ranks 2 and 1 count toward it, rank 0 completes it; with the store
  // full, one run's write fails.
  FreezeStoreSize();
  int step = 1;
  while (jobs_->GetStoreHealth().writable && step < 2000) {
    ++step;
    std::vector<v1::WorkerMessage> messages(3);
    std::vector<JobManager::WorkerMessageRef> refs;
    for (int index = 0; index < 3; ++index) {
      v1::StepReport* report = messages[index].mutable_step();
      report->set_job_id(id);
      report->set_attempt(1);
      report->set_rank(2 - index);
      report->set_step(step);
      report->set_loss(4.0);
      report->set_tokens_per_second(10);
      refs.push_back({&by_rank[2 - index], &messages[index]});
    }
    jobs_->OnWorkerMessages(refs);
  }
  ASSERT_FALSE(jobs_->GetStoreHealth().writable) << "the page limit never made a write fail";
  EXPECT_EQ(GetJob(id).step(), step - 1) << "the failed run's step is not shown";
  EXPECT_EQ(jobs_->GetStoreHealth().held_messages, 3);

  ASSERT_TRUE(store_->LimitPages(int64_t{1} << 30).ok());
  jobs_->Tick();
  ASSERT_TRUE(jobs_->GetStoreHealth().writable);
  job = GetJob(id);
  EXPECT_EQ(job.step(), step);
  EXPECT_DOUBLE_EQ(job.tokens_per_second(), 30) << "each rank counted once";
  absl::StatusOr<std::vector<StoredEvent>> events = store_->LoadEvents(id);
  ASSERT_TRUE(events.ok()) << events.status();
  const std::vector<int64_t> steps = StepsOf(*events);
  ASSERT_EQ(steps.size(), static_cast<size_t>(step));
  for (int i = 0; i < step; ++i) EXPECT_EQ(steps[i], i + 1);
  // The next step needs every rank again: nothing of step 2 was left counted toward it.
  Step(by_rank[1], id, 1, 1, step + 1, 3.0, 10);
  Step(by_rank[2], id, 1, 2, step + 1, 3.0, 10);
  EXPECT_EQ(GetJob(id).step(), step);
  Step(by_rank[0], id, 1, 0, step + 1, 3.0, 10);
  EXPECT_EQ(GetJob(id).step(), step + 1);
}

}  // namespace
}  // namespace fsdpd::server
