// Backpressure (server/report_pacer.h): a lagging coordinator tells its workers on every
// heartbeat ack to pace their step reports, and the reports a paced heartbeat carries count as
// if sent one by one: aggregated, stored, confirmed, and held with everything else while the
// store cannot write. Fixture: server_job_manager_fixture.h (heartbeat timeout 10 s, interval
// 1 s).
#include <atomic>
#include <thread>

#include "tests/unit/server_job_manager_fixture.h"

namespace fsdpd::server {
namespace {

using std::chrono::seconds;

// A heartbeat carrying rank `rank`'s reports of steps [first, last] of attempt 1.
v1::WorkerMessage PacedHeartbeat(const std::string& job, int rank, int first, int last) {
  v1::WorkerMessage message;
  message.mutable_heartbeat()->set_unix_millis(1);
  for (int step = first; step <= last; ++step) {
    v1::StepReport* report = message.mutable_heartbeat()->add_steps();
    report->set_job_id(job);
    report->set_attempt(1);
    report->set_rank(rank);
    report->set_step(step);
    report->set_loss(5.0 - 0.1 * step);
    report->set_tokens_per_second(100);
  }
  return message;
}

// The pacing the latest heartbeat ack a worker received asked for.
int64_t PacingOfLastAck(const FakeSession& session) {
  for (auto it = session.messages.rbegin(); it != session.messages.rend(); ++it) {
    if (it->has_heartbeat_ack()) return it->paced_interval_millis();
  }
  return -1;
}

TEST_F(JobManagerTest, ALaggingCoordinatorPacesReportsAndPacedHeartbeatsCountEveryStep) {
  const std::string w0 = AddWorker("host-a", 0);
  const std::string w1 = AddWorker("host-a", 1);
  const std::string id = *jobs_->Submit(SmallSpec(2, 0));
  const v1::Job placed = GetJob(id);
  const std::vector<std::string> by_rank(placed.worker_ids().begin(), placed.worker_ids().end());
  Heartbeat(w0);
  EXPECT_EQ(PacingOfLastAck(*sessions_[w0]), 0) << "a coordinator that keeps up paces no one";

  // A second's lag (a quarter of a beat is the bound) paces the fleet at the heartbeat interval.
  jobs_->processing_lag().NoteStall(seconds(1));
  jobs_->Tick();
  EXPECT_EQ(jobs_->GetLivenessHealth().paced_interval_millis, 1000);
  EXPECT_EQ(jobs_->GetLivenessHealth().pacings, 1);
  EXPECT_FALSE(jobs_->GetLivenessHealth().suspended) << "a lag under its bound loses no worker";

  // Each rank sends steps 1-3 in one heartbeat; the acks carry the pacing.
  for (int rank = 0; rank < 2; ++rank) {
    jobs_->OnWorkerMessage(by_rank[rank], PacedHeartbeat(id, rank, 1, 3));
    EXPECT_EQ(PacingOfLastAck(*sessions_[by_rank[rank]]), 1000);
  }
  v1::Job job = GetJob(id);
  EXPECT_EQ(job.state(), v1::RUNNING);
  EXPECT_EQ(job.step(), 3);
  EXPECT_DOUBLE_EQ(job.loss(), 4.7);
  EXPECT_DOUBLE_EQ(job.tokens_per_second(), 200) << "both ranks counted once";
  absl::StatusOr<std::vector<StoredEvent>> events = store_->LoadEvents(id);
  ASSERT_TRUE(events.ok()) << events.status();
  EXPECT_EQ(StepsOf(*events), (std::vector<int64_t>{1, 2, 3})) << "every step's aggregate";

  // Stored one row per rank and step, and confirmed on the next ack.
  ASSERT_TRUE(store_->Flush().ok());
  absl::StatusOr<std::vector<v1::StepReport>> rows = store_->LoadStepReports(id);
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(rows->size(), 6u);
  const size_t seen = sessions_[by_rank[0]]->messages.size();
  Heartbeat(by_rank[0]);
  const std::vector<v1::ReportsStored> stored = Confirmations(*sessions_[by_rank[0]], seen);
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_EQ(stored[0].through_step(), 3);

  // A resent heartbeat (after a reconnect) counts nothing twice.
  jobs_->OnWorkerMessage(by_rank[0], PacedHeartbeat(id, 0, 2, 4));
  EXPECT_EQ(GetJob(id).step(), 3) << "step 4 waits for rank 1";
  jobs_->OnWorkerMessage(by_rank[1], PacedHeartbeat(id, 1, 4, 4));
  EXPECT_EQ(GetJob(id).step(), 4);
  EXPECT_DOUBLE_EQ(GetJob(id).tokens_per_second(), 200);
}

TEST_F(JobManagerTest, StepsInAPacedHeartbeatAreHeldWhileTheStoreCannotWriteAndLoseNothing) {
  const std::string w0 = AddWorker("host-a", 0);
  const std::string id = *jobs_->Submit(SmallSpec(1, 0));
  jobs_->OnWorkerMessage(w0, PacedHeartbeat(id, 0, 1, 1));
  ASSERT_EQ(GetJob(id).step(), 1);

  FreezeStoreSize();
  int step = 1;
  while (jobs_->GetStoreHealth().writable && step < 4000) {
    jobs_->OnWorkerMessage(w0, PacedHeartbeat(id, 0, step + 1, step + 2));
    step += 2;
  }
  ASSERT_FALSE(jobs_->GetStoreHealth().writable) << "the page limit never made a write fail";
  const int64_t shown = GetJob(id).step();
  EXPECT_LT(shown, step) << "the failed run's steps are not shown";
  // The worker is still answered, and its reports are held one by one.
  const size_t seen = sessions_[w0]->messages.size();
  jobs_->OnWorkerMessage(w0, PacedHeartbeat(id, 0, step + 1, step + 3));
  step += 3;
  ASSERT_GT(sessions_[w0]->messages.size(), seen) << "no heartbeat ack while the store is full";
  EXPECT_TRUE(sessions_[w0]->messages.back().has_heartbeat_ack());
  EXPECT_EQ(jobs_->GetStoreHealth().held_messages, step - shown);
  EXPECT_EQ(GetJob(id).step(), shown);

  ASSERT_TRUE(store_->LimitPages(int64_t{1} << 30).ok());
  jobs_->Tick();
  ASSERT_TRUE(jobs_->GetStoreHealth().writable);
  EXPECT_EQ(jobs_->GetStoreHealth().held_messages, 0);
  EXPECT_EQ(GetJob(id).step(), step);
  absl::StatusOr<std::vector<StoredEvent>> events = store_->LoadEvents(id);
  ASSERT_TRUE(events.ok()) << events.status();
  const std::vector<int64_t> steps = StepsOf(*events);
  ASSERT_EQ(steps.size(), static_cast<size_t>(step));
  for (int i = 0; i < step; ++i) EXPECT_EQ(steps[i], i + 1) << "every step once, in order";
}

// Backpressure from the store: while its writer is more than kMaxQueuedStoreRows rows behind,
// the session dispatcher waits (WaitForStoreToCatchUp) instead of piling reports up in memory.
// The writer is held back here by another connection's write transaction on the same file.
TEST_F(JobManagerTest, TheDispatcherWaitsWhileTheStoreWriterIsFarBehind) {
  sqlite3* other = nullptr;
  ASSERT_EQ(sqlite3_open((directory_ + "/fsdpd.db").c_str(), &other), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(other, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
  const int64_t rows = JobManager::kMaxQueuedStoreRows + 1000;
  for (int64_t step = 1; step <= rows; ++step) {
    v1::StepReport report;
    report.set_job_id("job-000001");
    report.set_step(step);
    ASSERT_TRUE(store_->AppendStepReport(report).ok());
  }
  ASSERT_GT(store_->QueuedRows(), JobManager::kMaxQueuedStoreRows);

  std::atomic<bool> returned{false};
  std::thread dispatcher([&] {
    jobs_->WaitForStoreToCatchUp();
    returned = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_FALSE(returned.load()) << "it went on with the store's writer 51,000 rows behind";
  ASSERT_EQ(sqlite3_exec(other, "COMMIT", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(other);
  dispatcher.join();  // within 5 s: the writer drains, or the wait gives up
  EXPECT_LE(store_->QueuedRows(), JobManager::kMaxQueuedStoreRows);
}

// Heartbeat acks (job_manager_workers.cc, NeedsAck): an idle worker's numbered beats are
// answered only now and then; a beat whose answer says something is always answered.
TEST_F(JobManagerTest, NumberedHeartbeatsAreAnsweredWhenTheAnswerSaysSomething) {
  const std::string w0 = AddWorker("host-a", 0);
  std::vector<int64_t> answered;
  auto beat = [&](int64_t sequence, const std::string& unhealthy = "") {
    const size_t seen = sessions_[w0]->messages.size();
    v1::WorkerMessage message;
    message.mutable_heartbeat()->set_unix_millis(1);
    message.mutable_heartbeat()->set_sequence(sequence);
    if (!unhealthy.empty()) message.mutable_heartbeat()->mutable_health()->set_unhealthy(unhealthy);
    jobs_->OnWorkerMessage(w0, message);
    for (size_t i = seen; i < sessions_[w0]->messages.size(); ++i) {
      const v1::CoordinatorMessage& sent = sessions_[w0]->messages[i];
      if (sent.has_heartbeat_ack()) answered.push_back(sent.heartbeat_ack().sequence());
    }
  };
  for (int64_t sequence = 1; sequence <= 25; ++sequence) beat(sequence);
  EXPECT_EQ(answered, (std::vector<int64_t>{1, 10, 20})) << "the first, then every tenth";

  answered.clear();
  jobs_->processing_lag().NoteStall(seconds(1));
  jobs_->Tick();
  ASSERT_EQ(jobs_->GetLivenessHealth().paced_interval_millis, 1000);
  beat(26);
  beat(27);
  EXPECT_EQ(answered, (std::vector<int64_t>{26})) << "a new pacing is told once";
  EXPECT_EQ(PacingOfLastAck(*sessions_[w0]), 1000);
  beat(1);  // a new stream: the worker starts unpaced, and is told again
  EXPECT_EQ(answered, (std::vector<int64_t>{26, 1}));
  EXPECT_EQ(PacingOfLastAck(*sessions_[w0]), 1000);

  answered.clear();
  beat(2, "the attempt did not end within its cancel grace");
  EXPECT_EQ(answered, (std::vector<int64_t>{2})) << "a wedged worker waits for this ack to close";

  // Stored reports to confirm are answered at once.
  const std::string w1 = AddWorker("host-a", 1);
  const std::string id = *jobs_->Submit(SmallSpec(1, 0));
  ASSERT_EQ(GetJob(id).worker_ids(0), w1);
  Step(w1, id, 1, 0, 1, 5.0, 100);
  ASSERT_TRUE(store_->Flush().ok());
  const size_t seen = sessions_[w1]->messages.size();
  v1::WorkerMessage third;
  third.mutable_heartbeat()->set_sequence(3);
  jobs_->OnWorkerMessage(w1, third);
  const std::vector<v1::ReportsStored> stored = Confirmations(*sessions_[w1], seen);
  ASSERT_EQ(stored.size(), 1u) << "the stored step was not confirmed on a numbered beat";
  EXPECT_EQ(stored[0].through_step(), 1);
}

}  // namespace
}  // namespace fsdpd::server
