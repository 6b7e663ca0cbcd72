// The job manager's rank logs: stored and followed, damaged pages named, numbered lines stored
// once, and the per-job budget. Fixture: server_job_manager_fixture.h.
#include "tests/unit/server_job_manager_fixture.h"

namespace fsdpd::server {
namespace {

TEST_F(JobManagerTest, LogsAreStoredAndFollowed) {
  const std::string w0 = AddWorker("host-a", 0);
  const std::string id = *jobs_->Submit(SmallSpec(1, 0));
  v1::WorkerMessage message;
  message.mutable_log()->set_job_id(id);
  message.mutable_log()->set_attempt(1);
  message.mutable_log()->set_text("building the model");
  jobs_->OnWorkerMessage(w0, message);

  auto follower = std::make_shared<FakeSubscriber>();
  absl::StatusOr<JobManager::History> history = jobs_->Logs(id, 0, follower);
  ASSERT_TRUE(history.ok());
  ASSERT_EQ(history->logs.size(), 1u);
  EXPECT_EQ(history->logs[0].text(), "building the model");
  EXPECT_FALSE(history->ended);
  message.mutable_log()->set_text("step 1");
  jobs_->OnWorkerMessage(w0, message);
  ASSERT_EQ(follower->logs.size(), 1u);
  EXPECT_EQ(follower->logs[0].text(), "step 1");
  Result(w0, id, 1, 0, true);
  ASSERT_TRUE(follower->ended.has_value());
}

// A damaged page of the log table (a torn write, a bad disk) makes `fsdpctl logs` say what is
// damaged, not a raw SQL error, and the job's state and history keep answering. The coordinator
// still starts with a running job whose stored log cannot be counted for its budget.
TEST_F(JobManagerTest, DamagedLogPagesAreNamedAndTheRestStaysReadable) {
  const std::string w0 = AddWorker("host-a", 0);
  const std::string id = *jobs_->Submit(SmallSpec(1, 0));
  const std::string w1 = AddWorker("host-a", 1);
  const std::string running = *jobs_->Submit(SmallSpec(1, 0));
  ASSERT_EQ(sessions_[w1]->Assignments().size(), 1u);
  Step(w1, running, 1, 0, 1, 5.0, 100);
  for (int i = 0; i < 200; ++i) SendLog(w0, id, 0, std::string(200, 'x'));  // several pages
  SendLog(w1, running, 0, std::string(200, 'x'));
  Result(w0, id, 1, 0, true);
  ASSERT_TRUE(jobs_->Logs(id, 0, nullptr).ok());
  Stop();
  {
    // Overwrites the log table's root page with garbage, as a torn write would leave it.
    sqlite3* database = nullptr;
    ASSERT_EQ(sqlite3_open((directory_ + "/fsdpd.db").c_str(), &database), SQLITE_OK);
    sqlite3_stmt* query = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(database, "SELECT rootpage FROM sqlite_master WHERE name = 'logs'",
                                 -1, &query, nullptr),
              SQLITE_OK);
    ASSERT_EQ(sqlite3_step(query), SQLITE_ROW);
    const int64_t root_page = sqlite3_column_int64(query, 0);
    sqlite3_finalize(query);
    ASSERT_EQ(sqlite3_exec(database, "PRAGMA wal_checkpoint(TRUNCATE)", nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(database);
    std::fstream file(directory_ + "/fsdpd.db", std::ios::in | std::ios::out | std::ios::binary);
    constexpr int64_t kPageSize = 4096;  // SQLite's default
    file.seekp((root_page - 1) * kPageSize);
    const std::string garbage(kPageSize, '\x5a');
    file.write(garbage.data(), garbage.size());
  }
  Start();
  absl::StatusOr<JobManager::History> logs = jobs_->Logs(id, 0, nullptr);
  ASSERT_FALSE(logs.ok());
  EXPECT_EQ(logs.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(logs.status().message()),
              HasSubstr("the stored log lines of job " + id + " are damaged"));
  absl::StatusOr<v1::Job> job = jobs_->Get(id);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), v1::SUCCEEDED);
  absl::StatusOr<JobManager::History> history = jobs_->Watch(id, nullptr);
  ASSERT_TRUE(history.ok()) << history.status();
  EXPECT_FALSE(history->events.empty());
  EXPECT_EQ(GetJob(running).state(), v1::RUNNING);
}

// Numbered log lines are confirmed like step reports, stored once, and a resent one is not
// shown to followers again.
TEST_F(JobManagerTest, NumberedLogLinesAreConfirmedStoredOnceAndFollowedOnce) {
  const std::string w0 = AddWorker("host-a", 0);
  const std::string id = *jobs_->Submit(SmallSpec(1, 0));
  auto follower = std::make_shared<FakeSubscriber>();
  ASSERT_TRUE(jobs_->Logs(id, 0, follower).ok());
  SendLog(w0, id, 1, "first");
  SendLog(w0, id, 2, "second");
  Step(w0, id, 1, 0, 1, 5.0, 100);
  SendLog(w0, id, 2, "second");  // resent after a reconnect
  ASSERT_EQ(follower->logs.size(), 2u);
  EXPECT_EQ(follower->logs[1].text(), "second");

  size_t seen = sessions_[w0]->messages.size();
  Heartbeat(w0);
  EXPECT_TRUE(Confirmations(*sessions_[w0], seen).empty()) << "nothing is written yet";
  ASSERT_TRUE(store_->Flush().ok());
  seen = sessions_[w0]->messages.size();
  Heartbeat(w0);
  const std::vector<v1::ReportsStored> stored = Confirmations(*sessions_[w0], seen);
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_EQ(stored[0].through_log_sequence(), 2);
  EXPECT_EQ(stored[0].through_step(), 1);

  absl::StatusOr<std::vector<v1::LogLine>> lines = store_->LoadLogs(id, 0);
  ASSERT_TRUE(lines.ok()) << lines.status();
  ASSERT_EQ(lines->size(), 2u) << "the resent line is stored once";
  EXPECT_EQ((*lines)[0].text(), "first");
  EXPECT_EQ((*lines)[1].text(), "second");
}

// A job's stored log text is bounded: past --max-log-bytes-per-job one marker line says so,
// later lines are dropped but still confirmed (the worker forgets them), and a restarted
// coordinator counts what is already stored.
TEST_F(JobManagerTest, LogLinesPastTheJobsBudgetAreDroppedAfterOneMarker) {
  max_log_bytes_ = 1000;
  Restart();
  const std::string w0 = AddWorker("host-a", 0);
  const std::string id = *jobs_->Submit(SmallSpec(1, 0));
  auto follower = std::make_shared<FakeSubscriber>();
  ASSERT_TRUE(jobs_->Logs(id, 0, follower).ok());
  for (int sequence = 1; sequence <= 5; ++sequence) {
    SendLog(w0, id, sequence, std::string(400, static_cast<char>('a' + sequence)));
  }
  ASSERT_TRUE(store_->Flush().ok());
  size_t seen = sessions_[w0]->messages.size();
  Heartbeat(w0);
  const std::vector<v1::ReportsStored> stored = Confirmations(*sessions_[w0], seen);
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_EQ(stored[0].through_log_sequence(), 5) << "dropped lines are confirmed too";

  auto texts = [&] {
    std::vector<std::string> found;
    absl::StatusOr<std::vector<v1::LogLine>> lines = store_->LoadLogs(id, 0);
    EXPECT_TRUE(lines.ok()) << lines.status();
    if (lines.ok()) {
      for (const v1::LogLine& line : *lines) found.push_back(line.text().substr(0, 40));
    }
    return found;
  };
  const std::string marker =
      "fsdpd: this job's stored log reached --max-log-bytes-per-job (1000 bytes)";
  std::vector<std::string> lines = texts();
  ASSERT_EQ(lines.size(), 3u);  // 2 × 400 bytes fit in 1000, then the marker
  EXPECT_EQ(lines[0], std::string(40, 'b'));
  EXPECT_EQ(lines[1], std::string(40, 'c'));
  EXPECT_EQ(lines[2], marker.substr(0, 40));
  ASSERT_EQ(follower->logs.size(), 3u);
  EXPECT_THAT(follower->logs[2].text(), HasSubstr(marker));
  EXPECT_EQ(follower->logs[2].level(), "warning");

  // A restarted coordinator counts the 800 bytes already stored: 100 more fit, 400 do not.
  Restart();
  const std::string again = AddWorker("host-a", 0, w0, RankAssignment{id, 1, 0});
  SendLog(again, id, 6, std::string(100, 'y'));
  SendLog(again, id, 7, std::string(400, 'x'));
  lines = texts();
  EXPECT_EQ(std::count(lines.begin(), lines.end(), std::string(40, 'y')), 1);
  EXPECT_EQ(std::count(lines.begin(), lines.end(), std::string(40, 'x')), 0);
}

}  // namespace
}  // namespace fsdpd::server
