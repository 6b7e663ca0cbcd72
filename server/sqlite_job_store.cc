#include "server/sqlite_job_store.h"

#include <cstdio>
#include <map>
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

size_t SqliteJobStore::PendingRowsLocked() const {
  return pending_reports_.size() + pending_logs_.size();
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

absl::Status SqliteJobStore::RecordStep(const v1::Job& job, int64_t sequence,
                                        const v1::StepReport& aggregate) {
  std::lock_guard<std::mutex> lock(mutex_);
  SqliteTransaction transaction(database_);
  if (!transaction.status().ok()) return transaction.status();
  absl::StatusOr<SqliteStatement> insert = database_.Prepare(
      "INSERT OR REPLACE INTO step_events (job_id, sequence, attempt, step, report) "
      "VALUES (?1, ?2, ?3, ?4, ?5)");
  if (!insert.ok()) return insert.status();
  absl::Status status = insert->Bind(1, job.id())
                            .Bind(2, sequence)
                            .Bind(3, static_cast<int64_t>(aggregate.attempt()))
                            .Bind(4, aggregate.step())
                            .BindBlob(5, aggregate.SerializeAsString())
                            .Run();
  if (!status.ok()) return status;
  if (status = WriteJobRow(job); !status.ok()) return status;
  return transaction.Commit();
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
  pending_logs_.clear();
  return absl::OkStatus();
}

}  // namespace fsdpd::server
