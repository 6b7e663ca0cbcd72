#include "server/sqlite_job_store.h"

#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "spdlog/spdlog.h"

namespace fsdpd::server {
namespace {

// Migration i brings PRAGMA user_version from i to i + 1. Append, never edit.
const std::vector<std::string>& Migrations() {
  static const std::vector<std::string> migrations = {
      R"sql(
        CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
        CREATE TABLE jobs (
          id TEXT PRIMARY KEY,
          state INTEGER NOT NULL,
          spec BLOB NOT NULL,           -- fsdpd.v1.JobSpec
          job BLOB NOT NULL             -- fsdpd.v1.Job without spec and transitions
        );
        CREATE TABLE transitions (
          job_id TEXT NOT NULL REFERENCES jobs(id),
          sequence INTEGER NOT NULL,
          state INTEGER NOT NULL,
          reason TEXT NOT NULL,
          attempt INTEGER NOT NULL,
          unix_millis INTEGER NOT NULL,
          PRIMARY KEY (job_id, sequence)
        );
        CREATE TABLE attempts (
          job_id TEXT NOT NULL REFERENCES jobs(id),
          attempt INTEGER NOT NULL,
          start_unix_millis INTEGER NOT NULL,
          end_unix_millis INTEGER,
          ok INTEGER,
          reason TEXT,
          PRIMARY KEY (job_id, attempt)
        );
        CREATE TABLE assignments (
          job_id TEXT NOT NULL,
          attempt INTEGER NOT NULL,
          rank INTEGER NOT NULL,
          worker_id TEXT NOT NULL,
          PRIMARY KEY (job_id, attempt, rank),
          FOREIGN KEY (job_id, attempt) REFERENCES attempts(job_id, attempt)
        );
        CREATE TABLE step_reports (
          job_id TEXT NOT NULL,
          attempt INTEGER NOT NULL,
          rank INTEGER NOT NULL,
          step INTEGER NOT NULL,
          report BLOB NOT NULL,         -- fsdpd.v1.StepReport of one rank
          PRIMARY KEY (job_id, attempt, rank, step)
        );
        CREATE TABLE step_events (
          job_id TEXT NOT NULL,
          sequence INTEGER NOT NULL,
          attempt INTEGER NOT NULL,
          step INTEGER NOT NULL,
          report BLOB NOT NULL,         -- fsdpd.v1.StepReport aggregated over ranks
          PRIMARY KEY (job_id, sequence)
        );
        CREATE TABLE logs (
          id INTEGER PRIMARY KEY AUTOINCREMENT,
          job_id TEXT NOT NULL,
          attempt INTEGER NOT NULL,
          rank INTEGER NOT NULL,
          unix_millis INTEGER NOT NULL,
          level TEXT NOT NULL,
          text TEXT NOT NULL
        );
        CREATE INDEX logs_by_job ON logs (job_id, id);
      )sql",
  };
  return migrations;
}

template <typename Message>
absl::StatusOr<Message> ParseBlob(const std::string& bytes, const char* what) {
  Message message;
  if (!message.ParseFromString(bytes)) {
    return absl::DataLossError(absl::StrCat("stored ", what, " cannot be parsed"));
  }
  return message;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SqliteJobStore>> SqliteJobStore::Open(const JobStoreConfig& config) {
  if (absl::Status status = config.Check(); !status.ok()) return status;
  absl::StatusOr<SqliteDatabase> database = SqliteDatabase::Open(config.database_path);
  if (!database.ok()) return database.status();
  if (absl::Status status = database->Migrate(Migrations()); !status.ok()) {
    return absl::Status(status.code(), absl::StrCat(config.database_path, ": ", status.message()));
  }
  return std::unique_ptr<SqliteJobStore>(new SqliteJobStore(config, std::move(*database)));
}

SqliteJobStore::SqliteJobStore(JobStoreConfig config, SqliteDatabase database)
    : config_(std::move(config)), database_(std::move(database)) {}

SqliteJobStore::~SqliteJobStore() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (absl::Status status = FlushLocked(); !status.ok()) {
    spdlog::error("job store: final flush failed: {}", status.ToString());
  }
}

absl::StatusOr<std::string> SqliteJobStore::NextJobId() {
  std::lock_guard<std::mutex> lock(mutex_);
  SqliteTransaction transaction(database_);
  if (!transaction.status().ok()) return transaction.status();
  absl::StatusOr<SqliteStatement> update = database_.Prepare(
      "INSERT INTO counters (name, value) VALUES ('job_id', 1) "
      "ON CONFLICT(name) DO UPDATE SET value = value + 1 RETURNING value");
  if (!update.ok()) return update.status();
  absl::StatusOr<bool> row = update->Step();
  if (!row.ok()) return row.status();
  if (!*row) return absl::InternalError("job id counter returned no value");
  const int64_t value = update->ColumnInt(0);
  update = absl::InternalError("released");  // finalize before COMMIT
  if (absl::Status status = transaction.Commit(); !status.ok()) return status;
  return absl::StrFormat("job-%06d", value);
}

absl::Status SqliteJobStore::WriteJobRow(const v1::Job& job) {
  v1::Job row = job;
  row.clear_spec();
  row.clear_transitions();
  absl::StatusOr<SqliteStatement> statement = database_.Prepare(
      "INSERT INTO jobs (id, state, spec, job) VALUES (?1, ?2, ?3, ?4) "
      "ON CONFLICT(id) DO UPDATE SET state = ?2, job = ?4");
  if (!statement.ok()) return statement.status();
  return statement->Bind(1, job.id())
      .Bind(2, static_cast<int64_t>(job.state()))
      .BindBlob(3, job.spec().SerializeAsString())
      .BindBlob(4, row.SerializeAsString())
      .Run();
}

absl::Status SqliteJobStore::InsertJob(const v1::Job& job) {
  std::lock_guard<std::mutex> lock(mutex_);
  return WriteJobRow(job);
}

absl::Status SqliteJobStore::RecordTransition(const v1::Job& job, int64_t sequence,
                                              const v1::StateChange& change) {
  std::lock_guard<std::mutex> lock(mutex_);
  // The row written here is newer than any buffered progress of the same job.
  pending_progress_.erase(job.id());
  SqliteTransaction transaction(database_);
  if (!transaction.status().ok()) return transaction.status();
  if (absl::Status status = WriteJobRow(job); !status.ok()) return status;
  absl::StatusOr<SqliteStatement> insert = database_.Prepare(
      "INSERT INTO transitions (job_id, sequence, state, reason, attempt, unix_millis) "
      "VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
  if (!insert.ok()) return insert.status();
  absl::Status status = insert->Bind(1, change.job_id())
                            .Bind(2, sequence)
                            .Bind(3, static_cast<int64_t>(change.state()))
                            .Bind(4, change.reason())
                            .Bind(5, static_cast<int64_t>(change.attempt()))
                            .Bind(6, change.unix_millis())
                            .Run();
  if (!status.ok()) return status;
  return transaction.Commit();
}

absl::StatusOr<std::vector<v1::Job>> SqliteJobStore::LoadJobs() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (absl::Status status = FlushLocked(); !status.ok()) return status;
  std::vector<v1::Job> jobs;
  std::map<std::string, size_t> index;
  absl::StatusOr<SqliteStatement> select =
      database_.Prepare("SELECT id, spec, job FROM jobs ORDER BY id");
  if (!select.ok()) return select.status();
  while (true) {
    absl::StatusOr<bool> row = select->Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
    absl::StatusOr<v1::Job> job = ParseBlob<v1::Job>(select->ColumnBlob(2), "job");
    absl::StatusOr<v1::JobSpec> spec = ParseBlob<v1::JobSpec>(select->ColumnBlob(1), "spec");
    if (!job.ok()) return job.status();
    if (!spec.ok()) return spec.status();
    *job->mutable_spec() = std::move(*spec);
    index[job->id()] = jobs.size();
    jobs.push_back(std::move(*job));
  }
  absl::StatusOr<SqliteStatement> transitions = database_.Prepare(
      "SELECT job_id, state, reason, attempt, unix_millis FROM transitions "
      "ORDER BY job_id, sequence");
  if (!transitions.ok()) return transitions.status();
  while (true) {
    absl::StatusOr<bool> row = transitions->Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
    auto found = index.find(transitions->ColumnText(0));
    if (found == index.end()) continue;
    v1::StateChange* change = jobs[found->second].add_transitions();
    change->set_job_id(found->first);
    change->set_state(static_cast<v1::JobState>(transitions->ColumnInt(1)));
    change->set_reason(transitions->ColumnText(2));
    change->set_attempt(static_cast<int32_t>(transitions->ColumnInt(3)));
    change->set_unix_millis(transitions->ColumnInt(4));
  }
  return jobs;
}

absl::Status SqliteJobStore::InsertAttempt(const std::string& job_id, int attempt,
                                           const std::vector<AssignmentRecord>& assignments,
                                           int64_t start_unix_millis) {
  std::lock_guard<std::mutex> lock(mutex_);
  SqliteTransaction transaction(database_);
  if (!transaction.status().ok()) return transaction.status();
  absl::StatusOr<SqliteStatement> insert = database_.Prepare(
      "INSERT INTO attempts (job_id, attempt, start_unix_millis) VALUES (?1, ?2, ?3)");
  if (!insert.ok()) return insert.status();
  absl::Status status = insert->Bind(1, job_id)
                            .Bind(2, static_cast<int64_t>(attempt))
                            .Bind(3, start_unix_millis)
                            .Run();
  if (!status.ok()) return status;
  for (const AssignmentRecord& assignment : assignments) {
    absl::StatusOr<SqliteStatement> row = database_.Prepare(
        "INSERT INTO assignments (job_id, attempt, rank, worker_id) VALUES (?1, ?2, ?3, ?4)");
    if (!row.ok()) return row.status();
    status = row->Bind(1, job_id)
                 .Bind(2, static_cast<int64_t>(attempt))
                 .Bind(3, static_cast<int64_t>(assignment.rank))
                 .Bind(4, assignment.worker_id)
                 .Run();
    if (!status.ok()) return status;
  }
  return transaction.Commit();
}

absl::Status SqliteJobStore::FinishAttempt(const std::string& job_id, int attempt, bool ok,
                                           const std::string& reason, int64_t end_unix_millis) {
  std::lock_guard<std::mutex> lock(mutex_);
  absl::StatusOr<SqliteStatement> update = database_.Prepare(
      "UPDATE attempts SET end_unix_millis = ?3, ok = ?4, reason = ?5 "
      "WHERE job_id = ?1 AND attempt = ?2");
  if (!update.ok()) return update.status();
  return update->Bind(1, job_id)
      .Bind(2, static_cast<int64_t>(attempt))
      .Bind(3, end_unix_millis)
      .Bind(4, static_cast<int64_t>(ok ? 1 : 0))
      .Bind(5, reason)
      .Run();
}

absl::StatusOr<std::vector<AssignmentRecord>> SqliteJobStore::LoadAssignments(
    const std::string& job_id, int attempt) {
  std::lock_guard<std::mutex> lock(mutex_);
  absl::StatusOr<SqliteStatement> select = database_.Prepare(
      "SELECT rank, worker_id FROM assignments WHERE job_id = ?1 AND attempt = ?2 "
      "ORDER BY rank");
  if (!select.ok()) return select.status();
  select->Bind(1, job_id).Bind(2, static_cast<int64_t>(attempt));
  std::vector<AssignmentRecord> assignments;
  while (true) {
    absl::StatusOr<bool> row = select->Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
    assignments.push_back(
        {job_id, attempt, static_cast<int>(select->ColumnInt(0)), select->ColumnText(1)});
  }
  return assignments;
}

size_t SqliteJobStore::PendingRowsLocked() const {
  return pending_reports_.size() + pending_events_.size() + pending_progress_.size() +
         pending_logs_.size();
}

absl::Status SqliteJobStore::MaybeFlushLocked() {
  if (PendingRowsLocked() < static_cast<size_t>(config_.batch_rows)) return absl::OkStatus();
  return FlushLocked();
}

absl::Status SqliteJobStore::AppendStepReport(const v1::StepReport& report) {
  std::lock_guard<std::mutex> lock(mutex_);
  pending_reports_.push_back(report);
  return MaybeFlushLocked();
}

absl::Status SqliteJobStore::AppendStepEvent(const std::string& job_id, int64_t sequence,
                                             const v1::StepReport& aggregate) {
  std::lock_guard<std::mutex> lock(mutex_);
  pending_events_.push_back({job_id, sequence, aggregate});
  return MaybeFlushLocked();
}

absl::Status SqliteJobStore::UpdateProgress(const v1::Job& job) {
  std::lock_guard<std::mutex> lock(mutex_);
  pending_progress_[job.id()] = job;
  return MaybeFlushLocked();
}

absl::Status SqliteJobStore::AppendLog(const v1::LogLine& line) {
  std::lock_guard<std::mutex> lock(mutex_);
  pending_logs_.push_back(line);
  return MaybeFlushLocked();
}

absl::Status SqliteJobStore::Flush() {
  std::lock_guard<std::mutex> lock(mutex_);
  return FlushLocked();
}

absl::Status SqliteJobStore::FlushLocked() {
  if (PendingRowsLocked() == 0) return absl::OkStatus();
  SqliteTransaction transaction(database_);
  if (!transaction.status().ok()) return transaction.status();
  for (const v1::StepReport& report : pending_reports_) {
    absl::StatusOr<SqliteStatement> insert = database_.Prepare(
        "INSERT OR REPLACE INTO step_reports (job_id, attempt, rank, step, report) "
        "VALUES (?1, ?2, ?3, ?4, ?5)");
    if (!insert.ok()) return insert.status();
    absl::Status status = insert->Bind(1, report.job_id())
                              .Bind(2, static_cast<int64_t>(report.attempt()))
                              .Bind(3, static_cast<int64_t>(report.rank()))
                              .Bind(4, report.step())
                              .BindBlob(5, report.SerializeAsString())
                              .Run();
    if (!status.ok()) return status;
  }
  for (const PendingStepEvent& event : pending_events_) {
    absl::StatusOr<SqliteStatement> insert = database_.Prepare(
        "INSERT OR REPLACE INTO step_events (job_id, sequence, attempt, step, report) "
        "VALUES (?1, ?2, ?3, ?4, ?5)");
    if (!insert.ok()) return insert.status();
    absl::Status status = insert->Bind(1, event.job_id)
                              .Bind(2, event.sequence)
                              .Bind(3, static_cast<int64_t>(event.aggregate.attempt()))
                              .Bind(4, event.aggregate.step())
                              .BindBlob(5, event.aggregate.SerializeAsString())
                              .Run();
    if (!status.ok()) return status;
  }
  for (const auto& [job_id, job] : pending_progress_) {
    if (absl::Status status = WriteJobRow(job); !status.ok()) return status;
  }
  for (const v1::LogLine& line : pending_logs_) {
    absl::StatusOr<SqliteStatement> insert = database_.Prepare(
        "INSERT INTO logs (job_id, attempt, rank, unix_millis, level, text) "
        "VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
    if (!insert.ok()) return insert.status();
    absl::Status status = insert->Bind(1, line.job_id())
                              .Bind(2, static_cast<int64_t>(line.attempt()))
                              .Bind(3, static_cast<int64_t>(line.rank()))
                              .Bind(4, line.unix_millis())
                              .Bind(5, line.level())
                              .Bind(6, line.text())
                              .Run();
    if (!status.ok()) return status;
  }
  if (absl::Status status = transaction.Commit(); !status.ok()) return status;
  pending_reports_.clear();
  pending_events_.clear();
  pending_progress_.clear();
  pending_logs_.clear();
  return absl::OkStatus();
}

absl::StatusOr<std::vector<v1::StepReport>> SqliteJobStore::LoadStepReports(
    const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (absl::Status status = FlushLocked(); !status.ok()) return status;
  absl::StatusOr<SqliteStatement> select = database_.Prepare(
      "SELECT report FROM step_reports WHERE job_id = ?1 ORDER BY attempt, step, rank");
  if (!select.ok()) return select.status();
  select->Bind(1, job_id);
  std::vector<v1::StepReport> reports;
  while (true) {
    absl::StatusOr<bool> row = select->Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
    absl::StatusOr<v1::StepReport> report =
        ParseBlob<v1::StepReport>(select->ColumnBlob(0), "step report");
    if (!report.ok()) return report.status();
    reports.push_back(std::move(*report));
  }
  return reports;
}

absl::StatusOr<std::vector<StoredEvent>> SqliteJobStore::LoadEvents(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (absl::Status status = FlushLocked(); !status.ok()) return status;
  absl::StatusOr<SqliteStatement> select = database_.Prepare(
      "SELECT sequence, state, reason, attempt, unix_millis, NULL FROM transitions "
      "WHERE job_id = ?1 "
      "UNION ALL SELECT sequence, NULL, NULL, NULL, NULL, report FROM step_events "
      "WHERE job_id = ?1 ORDER BY 1");
  if (!select.ok()) return select.status();
  select->Bind(1, job_id);
  std::vector<StoredEvent> events;
  while (true) {
    absl::StatusOr<bool> row = select->Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
    StoredEvent stored;
    stored.sequence = select->ColumnInt(0);
    std::string report = select->ColumnBlob(5);
    if (!report.empty()) {
      absl::StatusOr<v1::StepReport> step = ParseBlob<v1::StepReport>(report, "step event");
      if (!step.ok()) return step.status();
      *stored.event.mutable_step() = std::move(*step);
    } else {
      v1::StateChange* change = stored.event.mutable_state();
      change->set_job_id(job_id);
      change->set_state(static_cast<v1::JobState>(select->ColumnInt(1)));
      change->set_reason(select->ColumnText(2));
      change->set_attempt(static_cast<int32_t>(select->ColumnInt(3)));
      change->set_unix_millis(select->ColumnInt(4));
    }
    events.push_back(std::move(stored));
  }
  return events;
}

absl::StatusOr<std::vector<v1::LogLine>> SqliteJobStore::LoadLogs(const std::string& job_id,
                                                                  int64_t tail) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (absl::Status status = FlushLocked(); !status.ok()) return status;
  absl::StatusOr<SqliteStatement> select = database_.Prepare(
      "SELECT attempt, rank, unix_millis, level, text FROM ("
      "  SELECT * FROM logs WHERE job_id = ?1 ORDER BY id DESC LIMIT ?2"
      ") ORDER BY id");
  if (!select.ok()) return select.status();
  select->Bind(1, job_id).Bind(2, tail > 0 ? tail : int64_t{-1});
  std::vector<v1::LogLine> lines;
  while (true) {
    absl::StatusOr<bool> row = select->Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
    v1::LogLine& line = lines.emplace_back();
    line.set_job_id(job_id);
    line.set_attempt(static_cast<int32_t>(select->ColumnInt(0)));
    line.set_rank(static_cast<int32_t>(select->ColumnInt(1)));
    line.set_unix_millis(select->ColumnInt(2));
    line.set_level(select->ColumnText(3));
    line.set_text(select->ColumnText(4));
  }
  return lines;
}

}  // namespace fsdpd::server
