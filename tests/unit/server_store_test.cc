#include <gtest/gtest.h>
#include <sqlite3.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "server/sqlite_job_store.h"

namespace fsdpd::server {
namespace {

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/fsdpd-store-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    directory_ = pattern;
    config_.database_path = directory_ + "/fsdpd.db";
    config_.batch_rows = 1000;  // nothing is written before Flush or a load
  }
  void TearDown() override { std::filesystem::remove_all(directory_); }

  std::unique_ptr<SqliteJobStore> Open() {
    absl::StatusOr<std::unique_ptr<SqliteJobStore>> store = SqliteJobStore::Open(config_);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? std::move(*store) : nullptr;
  }

  std::string directory_;
  JobStoreConfig config_;
};

v1::Job MakeJob(const std::string& id, v1::JobState state) {
  v1::Job job;
  job.set_id(id);
  job.set_state(state);
  job.mutable_spec()->set_name("model-" + id);
  job.mutable_spec()->mutable_parallel()->set_world_size(2);
  job.set_created_unix_millis(1000);
  return job;
}

v1::StateChange Change(const std::string& id, v1::JobState state, const std::string& reason) {
  v1::StateChange change;
  change.set_job_id(id);
  change.set_state(state);
  change.set_reason(reason);
  change.set_attempt(1);
  change.set_unix_millis(2000);
  return change;
}

TEST_F(StoreTest, JobIdsAreMonotonicAcrossReopening) {
  {
    auto store = Open();
    EXPECT_EQ(*store->NextJobId(), "job-000001");
    EXPECT_EQ(*store->NextJobId(), "job-000002");
  }
  auto store = Open();
  EXPECT_EQ(*store->NextJobId(), "job-000003");
}

TEST_F(StoreTest, EverythingSurvivesReopening) {
  {
    auto store = Open();
    v1::Job job = MakeJob("job-000001", v1::PENDING);
    job.set_owner("token:alice");
    ASSERT_TRUE(store->InsertJob(job).ok());
    v1::StateChange submitted = Change(job.id(), v1::PENDING, "submitted");
    submitted.set_actor("token:alice");
    ASSERT_TRUE(store->RecordTransition(job, 1, submitted).ok());
    job.set_state(v1::SCHEDULED);
    job.set_attempt(1);
    job.add_worker_ids("w0");
    job.add_worker_ids("w1");
    ASSERT_TRUE(
        store->InsertAttempt(job.id(), 1, {{job.id(), 1, 0, "w0"}, {job.id(), 1, 1, "w1"}}, 2000)
            .ok());
    ASSERT_TRUE(store->RecordTransition(job, 2, Change(job.id(), v1::SCHEDULED, "placed")).ok());
    for (int rank = 0; rank < 2; ++rank) {
      v1::StepReport report;
      report.set_job_id(job.id());
      report.set_attempt(1);
      report.set_rank(rank);
      report.set_step(1);
      report.set_loss(10.5);
      ASSERT_TRUE(store->AppendStepReport(report).ok());
    }
    v1::StepReport aggregate;
    aggregate.set_job_id(job.id());
    aggregate.set_step(1);
    aggregate.set_loss(10.5);
    aggregate.set_tokens_per_second(123);
    job.set_step(1);
    job.set_loss(10.5);
    ASSERT_TRUE(store->RecordStep(job, 3, aggregate).ok());
    for (const char* text : {"first", "second", "third"}) {
      v1::LogLine line;
      line.set_job_id(job.id());
      line.set_text(text);
      line.set_level("info");
      ASSERT_TRUE(store->AppendLog(line).ok());
    }
    // No explicit Flush: closing the store must write the batch.
  }
  auto store = Open();
  absl::StatusOr<std::vector<v1::Job>> jobs = store->LoadJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 1u);
  const v1::Job& job = jobs->front();
  EXPECT_EQ(job.state(), v1::SCHEDULED);
  EXPECT_EQ(job.spec().name(), "model-job-000001");
  EXPECT_EQ(job.step(), 1);
  EXPECT_DOUBLE_EQ(job.loss(), 10.5);
  ASSERT_EQ(job.worker_ids_size(), 2);
  ASSERT_EQ(job.transitions_size(), 2);
  EXPECT_EQ(job.transitions(0).state(), v1::PENDING);
  EXPECT_EQ(job.transitions(1).reason(), "placed");
  EXPECT_EQ(job.owner(), "token:alice");
  EXPECT_EQ(job.transitions(0).actor(), "token:alice");
  EXPECT_EQ(job.transitions(1).actor(), "");

  absl::StatusOr<std::vector<AssignmentRecord>> assignments =
      store->LoadAssignments("job-000001", 1);
  ASSERT_TRUE(assignments.ok());
  ASSERT_EQ(assignments->size(), 2u);
  EXPECT_EQ((*assignments)[1].worker_id, "w1");

  EXPECT_EQ(store->LoadStepReports("job-000001")->size(), 2u);
  absl::StatusOr<std::vector<StoredEvent>> events = store->LoadEvents("job-000001");
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 3u);
  EXPECT_TRUE((*events)[0].event.has_state());
  EXPECT_EQ((*events)[0].event.state().actor(), "token:alice");
  EXPECT_TRUE((*events)[1].event.has_state());
  ASSERT_TRUE((*events)[2].event.has_step());
  EXPECT_DOUBLE_EQ((*events)[2].event.step().tokens_per_second(), 123);

  absl::StatusOr<std::vector<v1::LogLine>> logs = store->LoadLogs("job-000001", 0);
  ASSERT_EQ(logs->size(), 3u);
  EXPECT_EQ((*logs)[0].text(), "first");
  logs = store->LoadLogs("job-000001", 2);
  ASSERT_EQ(logs->size(), 2u);
  EXPECT_EQ((*logs)[0].text(), "second");
  EXPECT_EQ((*logs)[1].text(), "third");
}

TEST_F(StoreTest, StepsAreDurableWithoutAFlush) {
  auto store = Open();
  v1::Job job = MakeJob("job-000001", v1::RUNNING);
  ASSERT_TRUE(store->InsertJob(job).ok());
  job.set_step(5);
  v1::StepReport aggregate;
  aggregate.set_job_id(job.id());
  aggregate.set_step(5);
  ASSERT_TRUE(store->RecordStep(job, 1, aggregate).ok());
  v1::StepReport report = aggregate;
  report.set_rank(0);
  ASSERT_TRUE(store->AppendStepReport(report).ok());  // buffered: batch_rows is 1000

  // A second connection sees what a killed coordinator would leave behind.
  JobStoreConfig other = config_;
  absl::StatusOr<std::unique_ptr<SqliteJobStore>> reader = SqliteJobStore::Open(other);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ((*reader)->LoadJobs()->front().step(), 5);
  EXPECT_EQ((*reader)->LoadEvents(job.id())->size(), 1u);
  EXPECT_TRUE((*reader)->LoadStepReports(job.id())->empty());
  ASSERT_TRUE(store->Flush().ok());
  EXPECT_EQ((*reader)->LoadStepReports(job.id())->size(), 1u);
}

TEST_F(StoreTest, UsesWalAndRefusesANewerSchema) {
  { auto store = Open(); }
  sqlite3* database = nullptr;
  ASSERT_EQ(sqlite3_open(config_.database_path.c_str(), &database), SQLITE_OK);
  sqlite3_stmt* statement = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(database, "PRAGMA journal_mode", -1, &statement, nullptr),
            SQLITE_OK);
  ASSERT_EQ(sqlite3_step(statement), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(statement, 0)), "wal");
  sqlite3_finalize(statement);
  ASSERT_EQ(sqlite3_exec(database, "PRAGMA user_version = 99", nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(database);

  absl::StatusOr<std::unique_ptr<SqliteJobStore>> store = SqliteJobStore::Open(config_);
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find("newer"), std::string::npos) << store.status();
}

// Rows in step_reports as another connection sees them (what a killed coordinator leaves).
int64_t StoredReportRows(const std::string& database_path) {
  sqlite3* database = nullptr;
  if (sqlite3_open(database_path.c_str(), &database) != SQLITE_OK) return -1;
  sqlite3_stmt* statement = nullptr;
  int64_t rows = -1;
  if (sqlite3_prepare_v2(database, "SELECT COUNT(*) FROM step_reports", -1, &statement, nullptr) ==
          SQLITE_OK &&
      sqlite3_step(statement) == SQLITE_ROW) {
    rows = sqlite3_column_int64(statement, 0);
  }
  sqlite3_finalize(statement);
  sqlite3_close(database);
  return rows;
}

TEST_F(StoreTest, TheWriterThreadWritesFullBatchesWithoutAFlush) {
  config_.batch_rows = 4;
  auto store = Open();
  for (int step = 1; step <= 9; ++step) {
    v1::StepReport report;
    report.set_job_id("job-000001");
    report.set_step(step);
    absl::StatusOr<int64_t> number = store->AppendStepReport(report);
    ASSERT_TRUE(number.ok()) << number.status();
    EXPECT_EQ(*number, step) << "reports are numbered in the order they are appended";
  }
  // Appending never writes on the caller's thread; the writer takes whole batches (8 of the 9
  // rows), and the ninth waits for a flush. StoredStepReports follows what is written.
  int64_t rows = 0;
  for (int wait = 0; wait < 200 && (rows < 8 || store->StoredStepReports() < 8); ++wait) {
    rows = StoredReportRows(config_.database_path);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(rows, 8);
  EXPECT_EQ(store->StoredStepReports(), 8);
  EXPECT_EQ(store->QueuedRows(), 1) << "how far the writer is behind: the job manager waits on it";
  ASSERT_TRUE(store->Flush().ok());
  EXPECT_EQ(store->QueuedRows(), 0);
  EXPECT_EQ(StoredReportRows(config_.database_path), 9);
  EXPECT_EQ(store->StoredStepReports(), 9);
  EXPECT_EQ(store->LoadStepReports("job-000001")->size(), 9u);
}

v1::StepReport RankReport(const std::string& job_id, int attempt, int rank, int64_t step) {
  v1::StepReport report;
  report.set_job_id(job_id);
  report.set_attempt(attempt);
  report.set_rank(rank);
  report.set_step(step);
  return report;
}

// (attempt, step) of every stored rank report of the job, in LoadStepReports' order.
std::vector<std::pair<int, int64_t>> StoredSteps(SqliteJobStore& store, const std::string& job) {
  std::vector<std::pair<int, int64_t>> steps;
  const absl::StatusOr<std::vector<v1::StepReport>> reports = store.LoadStepReports(job);
  EXPECT_TRUE(reports.ok()) << reports.status();
  if (!reports.ok()) return steps;
  for (const v1::StepReport& report : *reports) steps.push_back({report.attempt(), report.step()});
  return steps;
}

std::vector<std::pair<int, int64_t>> Steps(int attempt, int64_t first, int64_t last, int ranks) {
  std::vector<std::pair<int, int64_t>> steps;
  for (int64_t step = first; step <= last; ++step) {
    for (int rank = 0; rank < ranks; ++rank) steps.push_back({attempt, step});
  }
  return steps;
}

// A long job must not grow the database without bound: per-rank reports are kept for the
// newest rank_report_steps steps of each attempt (the aggregated steps stay whole), counted
// per job attempt, and pruning goes on after a restart.
TEST_F(StoreTest, RankReportsPastTheRetentionAreDeletedAsTheJobAdvances) {
  config_.rank_report_steps = 10;
  {
    auto store = Open();
    for (int64_t step = 1; step <= 50; ++step) {
      for (int rank = 0; rank < 2; ++rank) {
        ASSERT_TRUE(store->AppendStepReport(RankReport("job-a", 1, rank, step)).ok());
      }
      ASSERT_TRUE(store->AppendStepReport(RankReport("job-b", 1, 0, step)).ok());
      if (step <= 5) {
        for (int rank = 0; rank < 2; ++rank) {
          ASSERT_TRUE(store->AppendStepReport(RankReport("job-a", 2, rank, step)).ok());
        }
      }
      if (step % 5 == 0) {
        ASSERT_TRUE(store->Flush().ok());
      }
    }
    std::vector<std::pair<int, int64_t>> expected = Steps(1, 41, 50, 2);
    const std::vector<std::pair<int, int64_t>> second_attempt = Steps(2, 1, 5, 2);
    expected.insert(expected.end(), second_attempt.begin(), second_attempt.end());
    EXPECT_EQ(StoredSteps(*store, "job-a"), expected);
    EXPECT_EQ(StoredSteps(*store, "job-b"), Steps(1, 41, 50, 1));
    EXPECT_EQ(store->StoredStepReports(), 50 * 3 + 5 * 2) << "the count of stored reports "
                                                             "(confirmations) is not a row count";
  }
  auto reopened = Open();
  for (int64_t step = 51; step <= 55; ++step) {
    for (int rank = 0; rank < 2; ++rank) {
      ASSERT_TRUE(reopened->AppendStepReport(RankReport("job-a", 1, rank, step)).ok());
    }
  }
  ASSERT_TRUE(reopened->Flush().ok());
  std::vector<std::pair<int, int64_t>> expected = Steps(1, 46, 55, 2);
  const std::vector<std::pair<int, int64_t>> second_attempt = Steps(2, 1, 5, 2);
  expected.insert(expected.end(), second_attempt.begin(), second_attempt.end());
  EXPECT_EQ(StoredSteps(*reopened, "job-a"), expected);
}

// On a full disk the chunk fails whole: no report is lost and none is pruned; once there is
// room again the same chunk stores its reports and prunes as if nothing had happened.
TEST_F(StoreTest, AFullDiskNeitherLosesNorPrunesRankReports) {
  config_.rank_report_steps = 10;
  auto store = Open();
  // Enough rows that the database has grown past its first pages.
  for (int64_t step = 1; step <= 300; ++step) {
    ASSERT_TRUE(store->AppendStepReport(RankReport("job-a", 1, 0, step)).ok());
  }
  ASSERT_TRUE(store->Flush().ok());
  absl::StatusOr<int64_t> pages = store->LimitPages(0);  // 0 reads the page count
  ASSERT_TRUE(pages.ok()) << pages.status();
  ASSERT_TRUE(store->LimitPages(*pages).ok());  // no room to grow
  std::string blob(64 * 1024, 'x');             // a report larger than any free space left
  for (int64_t step = 301; step <= 305; ++step) {
    v1::StepReport report = RankReport("job-a", 1, 0, step);
    report.set_memory_device_used_source(blob);  // any field: only the size matters
    ASSERT_TRUE(store->AppendStepReport(report).ok());
  }
  EXPECT_FALSE(store->Flush().ok());
  EXPECT_EQ(StoredSteps(*store, "job-a"), Steps(1, 291, 300, 1)) << "the failed chunk pruned";
  ASSERT_TRUE(store->LimitPages(int64_t{1} << 30).ok());
  ASSERT_TRUE(store->Flush().ok());
  EXPECT_EQ(StoredSteps(*store, "job-a"), Steps(1, 296, 305, 1));
  EXPECT_EQ(store->StoredStepReports(), 305);
}

TEST_F(StoreTest, ARetentionOfZeroKeepsEveryRankReport) {
  config_.rank_report_steps = 0;
  auto store = Open();
  for (int64_t step = 1; step <= 40; ++step) {
    ASSERT_TRUE(store->AppendStepReport(RankReport("job-a", 1, 0, step)).ok());
    if (step % 8 == 0) {
      ASSERT_TRUE(store->Flush().ok());
    }
  }
  EXPECT_EQ(StoredSteps(*store, "job-a"), Steps(1, 1, 40, 1));
}

// Each rank is pruned against its own newest step, in every chunk the writer stores: a rank
// that fell behind keeps its own newest steps, and no rank ever holds more than the retention.
TEST_F(StoreTest, EachRankKeepsItsOwnNewestSteps) {
  config_.rank_report_steps = 4;
  auto store = Open();
  for (int64_t step = 1; step <= 30; ++step) {
    ASSERT_TRUE(store->AppendStepReport(RankReport("job-a", 1, 0, step)).ok());
    if (step <= 12) {  // rank 1 stops reporting at step 12
      ASSERT_TRUE(store->AppendStepReport(RankReport("job-a", 1, 1, step)).ok());
    }
    ASSERT_TRUE(store->Flush().ok());
    const absl::StatusOr<std::vector<v1::StepReport>> reports = store->LoadStepReports("job-a");
    ASSERT_TRUE(reports.ok()) << reports.status();
    std::map<int, int> per_rank;
    for (const v1::StepReport& report : *reports) ++per_rank[report.rank()];
    for (const auto& [rank, count] : per_rank) ASSERT_LE(count, 4) << "rank " << rank;
  }
  std::vector<std::pair<int, int64_t>> expected = {{1, 9},  {1, 10}, {1, 11}, {1, 12},
                                                   {1, 27}, {1, 28}, {1, 29}, {1, 30}};
  EXPECT_EQ(StoredSteps(*store, "job-a"), expected);
}

TEST_F(StoreTest, EventsCanBeLimitedToTheNewestSteps) {
  auto store = Open();
  v1::Job job = MakeJob("job-000001", v1::RUNNING);
  ASSERT_TRUE(store->InsertJob(job).ok());
  int64_t sequence = 0;
  ASSERT_TRUE(store->RecordTransition(job, ++sequence, Change(job.id(), v1::PENDING, "a")).ok());
  ASSERT_TRUE(store->RecordTransition(job, ++sequence, Change(job.id(), v1::RUNNING, "b")).ok());
  for (int64_t step = 1; step <= 20; ++step) {
    job.set_step(step);
    v1::StepReport aggregate;
    aggregate.set_job_id(job.id());
    aggregate.set_step(step);
    ASSERT_TRUE(store->RecordStep(job, ++sequence, aggregate).ok());
    if (step == 10) {
      ASSERT_TRUE(
          store->RecordTransition(job, ++sequence, Change(job.id(), v1::RUNNING, "resumed")).ok());
    }
  }
  // What each event is: a state's reason, or "step N".
  auto described = [&](int64_t max_steps) {
    std::vector<std::string> names;
    absl::StatusOr<std::vector<StoredEvent>> events = store->LoadEvents(job.id(), max_steps);
    EXPECT_TRUE(events.ok()) << events.status();
    if (!events.ok()) return names;
    int64_t previous = 0;
    for (const StoredEvent& stored : *events) {
      EXPECT_GT(stored.sequence, previous) << "in sequence order";
      previous = stored.sequence;
      names.push_back(stored.event.has_step() ? "step " + std::to_string(stored.event.step().step())
                                              : stored.event.state().reason());
    }
    return names;
  };
  EXPECT_EQ(described(3),
            (std::vector<std::string>{"a", "b", "resumed", "step 18", "step 19", "step 20"}));
  EXPECT_EQ(described(0), (std::vector<std::string>{"a", "b", "resumed"}));
  EXPECT_EQ(described(-1).size(), 23u);
  EXPECT_EQ(described(100).size(), 23u);
}

TEST_F(StoreTest, ANumberedLogLineIsStoredOnce) {
  auto store = Open();
  auto line = [](int64_t sequence, const std::string& text) {
    v1::LogLine log;
    log.set_job_id("job-000001");
    log.set_attempt(1);
    log.set_rank(0);
    log.set_sequence(sequence);
    log.set_text(text);
    log.set_level("info");
    return log;
  };
  // Numbered 1 and 2, 2 again (a worker's resend), and an unnumbered line twice.
  std::vector<int64_t> numbers;
  for (const v1::LogLine& log :
       {line(1, "a"), line(2, "b"), line(2, "b"), line(0, "warning"), line(0, "warning")}) {
    absl::StatusOr<int64_t> number = store->AppendLog(log);
    ASSERT_TRUE(number.ok()) << number.status();
    numbers.push_back(*number);
  }
  EXPECT_EQ(numbers, (std::vector<int64_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(store->StoredLogs(), 0);
  ASSERT_TRUE(store->Flush().ok());
  EXPECT_EQ(store->StoredLogs(), 5) << "the copy counts as stored: it is in the database";
  absl::StatusOr<std::vector<v1::LogLine>> logs = store->LoadLogs("job-000001", 0);
  ASSERT_TRUE(logs.ok()) << logs.status();
  std::vector<std::string> texts;
  for (const v1::LogLine& log : *logs) texts.push_back(log.text());
  EXPECT_EQ(texts, (std::vector<std::string>{"a", "b", "warning", "warning"}));
}

TEST_F(StoreTest, AGroupIsCommittedAtOnceAtItsEnd) {
  auto store = Open();
  v1::Job job = MakeJob("job-000001", v1::RUNNING);
  ASSERT_TRUE(store->InsertJob(job).ok());
  JobStoreConfig other = config_;
  absl::StatusOr<std::unique_ptr<SqliteJobStore>> reader = SqliteJobStore::Open(other);
  ASSERT_TRUE(reader.ok()) << reader.status();

  store->BeginGroup();
  ASSERT_TRUE(store->RecordTransition(job, 1, Change(job.id(), v1::RUNNING, "started")).ok());
  for (int64_t step = 1; step <= 3; ++step) {
    job.set_step(step);
    v1::StepReport aggregate;
    aggregate.set_job_id(job.id());
    aggregate.set_step(step);
    ASSERT_TRUE(store->RecordStep(job, step + 1, aggregate).ok());
  }
  EXPECT_TRUE((*reader)->LoadEvents(job.id())->empty());
  EXPECT_EQ((*reader)->LoadJobs()->front().step(), 0);
  ASSERT_TRUE(store->EndGroup().ok());

  absl::StatusOr<std::vector<StoredEvent>> events = (*reader)->LoadEvents(job.id());
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), 4u);
  EXPECT_EQ(events->front().event.state().reason(), "started");
  EXPECT_EQ(events->back().event.step().step(), 3);
  EXPECT_EQ((*reader)->LoadJobs()->front().step(), 3);
  EXPECT_EQ((*reader)->LoadJobs()->front().spec().name(), "model-job-000001");

  // A write that fails inside a group (sequence 1 is taken) fails the whole group: SQLite may
  // have ended its transaction (SQLITE_FULL can), so nothing of it is stored and the job
  // manager undoes the whole run (issue 11 §2).
  store->BeginGroup();
  job.set_step(4);
  v1::StepReport fourth;
  fourth.set_job_id(job.id());
  fourth.set_step(4);
  ASSERT_TRUE(store->RecordStep(job, 5, fourth).ok());
  EXPECT_FALSE(store->RecordTransition(job, 1, Change(job.id(), v1::FAILED, "again")).ok());
  EXPECT_FALSE(store->RecordStep(job, 6, fourth).ok()) << "no write after a failed one";
  EXPECT_FALSE(store->EndGroup().ok());
  EXPECT_EQ((*reader)->LoadEvents(job.id())->size(), 4u);
  EXPECT_EQ((*reader)->LoadJobs()->front().step(), 3);
  EXPECT_FALSE(store->EndGroup().ok()) << "EndGroup without a group must be refused";
}

}  // namespace
}  // namespace fsdpd::server
