// The SQLite job store: schema migrations, prepared statements, write groups, and the
// synchronous writes (ids, job rows, transitions, attempts, aggregated steps).
#include "server/sqlite_job_store.h"

#include <thread>
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
      // Log lines numbered by their worker are stored once: a worker resends the lines the
      // coordinator had not confirmed as stored.
      R"sql(
        ALTER TABLE logs ADD COLUMN sequence INTEGER NOT NULL DEFAULT 0;
        CREATE UNIQUE INDEX logs_by_sequence ON logs (job_id, attempt, rank, sequence)
          WHERE sequence > 0;
      )sql",
      // Who caused each state change (StateChange.actor). Rows from before are "".
      R"sql(
        ALTER TABLE transitions ADD COLUMN actor TEXT NOT NULL DEFAULT '';
      )sql",
      // Complete checkpoints as rank 0 reports them (fsdpctl checkpoints); `hosts` holds the
      // attempt's hostnames, one per line. A state folder from before starts with none.
      R"sql(
        CREATE TABLE checkpoints (
          job_id TEXT NOT NULL,
          step INTEGER NOT NULL,
          commit_unix_millis INTEGER NOT NULL,
          size_bytes INTEGER NOT NULL,
          attempt INTEGER NOT NULL,
          world_size INTEGER NOT NULL,
          hosts TEXT NOT NULL,
          PRIMARY KEY (job_id, step)
        );
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
  std::unique_ptr<SqliteJobStore> store(new SqliteJobStore(config, std::move(*database)));
  if (absl::Status status = store->PrepareStatements(); !status.ok()) {
    return absl::Status(status.code(), absl::StrCat(config.database_path, ": ", status.message()));
  }
  store->writer_ = std::thread([raw = store.get()] { raw->RunWriter(); });
  return store;
}

SqliteJobStore::SqliteJobStore(JobStoreConfig config, SqliteDatabase database)
    : config_(std::move(config)), database_(std::move(database)) {}

SqliteJobStore::~SqliteJobStore() {
  {
    std::lock_guard<std::mutex> lock(pending_mutex_);
    stopping_ = true;
  }
  batch_ready_.notify_all();
  if (writer_.joinable()) writer_.join();
  auto lock = LockConnection();
  if (absl::Status status = FlushLocked(); !status.ok()) {
    spdlog::error("job store: final flush failed: {}", status.ToString());
  }
}

absl::Status SqliteJobStore::PrepareStatements() {
  auto lock = LockConnection();
  std::vector<SqliteStatement> prepared;
  for (const char* sql : {
           "INSERT INTO jobs (id, state, spec, job) VALUES (?1, ?2, ?3, ?4) "
           "ON CONFLICT(id) DO UPDATE SET state = ?2, job = ?4",
           // A step leaves the spec as it is: it is not serialized again for every step.
           "UPDATE jobs SET state = ?2, job = ?3 WHERE id = ?1",
           "INSERT INTO transitions (job_id, sequence, state, reason, attempt, unix_millis, actor) "
           "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
           "INSERT OR REPLACE INTO step_events (job_id, sequence, attempt, step, report) "
           "VALUES (?1, ?2, ?3, ?4, ?5)",
           "INSERT OR REPLACE INTO step_reports (job_id, attempt, rank, step, report) "
           "VALUES (?1, ?2, ?3, ?4, ?5)",
           "INSERT OR IGNORE INTO logs (job_id, attempt, rank, unix_millis, level, text, "
           "sequence) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
           // Every column of the primary key, so the delete is an index range per rank.
           "DELETE FROM step_reports WHERE job_id = ?1 AND attempt = ?2 AND rank = ?3 AND "
           "step <= ?4",
       }) {
    absl::StatusOr<SqliteStatement> statement = database_.Prepare(sql);
    if (!statement.ok()) return statement.status();
    prepared.push_back(std::move(*statement));
  }
  statements_.emplace(Statements{std::move(prepared[0]), std::move(prepared[1]),
                                 std::move(prepared[2]), std::move(prepared[3]),
                                 std::move(prepared[4]), std::move(prepared[5]),
                                 std::move(prepared[6])});
  return absl::OkStatus();
}

std::unique_lock<std::mutex> SqliteJobStore::LockConnection() {
  std::unique_lock<std::mutex> lock(mutex_);
  group_closed_.wait(lock, [&] { return !group_open_ || InOwnGroupLocked(); });
  return lock;
}

bool SqliteJobStore::InOwnGroupLocked() const {
  return group_open_ && group_owner_ == std::this_thread::get_id();
}

void SqliteJobStore::BeginGroup() {
  auto lock = LockConnection();
  group_open_ = true;
  group_begun_ = false;
  group_failed_ = false;
  group_owner_ = std::this_thread::get_id();
}

absl::Status SqliteJobStore::EndGroup() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!InOwnGroupLocked()) return absl::FailedPreconditionError("EndGroup without BeginGroup");
  absl::Status status;
  if (group_failed_) {
    // SQLite may already have rolled the whole transaction back (SQLITE_FULL can): commit
    // nothing of a group in which a write failed.
    database_.Execute("ROLLBACK").IgnoreError();
    status = absl::AbortedError("a write of the group failed; none of it was stored");
  } else if (group_begun_) {
    status = database_.Execute("COMMIT");
    if (!status.ok()) database_.Execute("ROLLBACK").IgnoreError();
  }
  group_open_ = false;
  group_begun_ = false;
  lock.unlock();
  group_closed_.notify_all();
  return status;
}

void SqliteJobStore::AbortGroup() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!InOwnGroupLocked()) return;
  if (group_begun_) database_.Execute("ROLLBACK").IgnoreError();
  group_open_ = false;
  group_begun_ = false;
  lock.unlock();
  group_closed_.notify_all();
}

absl::StatusOr<int64_t> SqliteJobStore::LimitPages(int64_t max_pages) {
  auto lock = LockConnection();
  if (absl::Status status = database_.Execute(absl::StrCat("PRAGMA max_page_count = ", max_pages));
      !status.ok()) {
    return status;
  }
  absl::StatusOr<SqliteStatement> query = database_.Prepare("PRAGMA page_count");
  if (!query.ok()) return query.status();
  absl::StatusOr<bool> row = query->Step();
  if (!row.ok()) return row.status();
  return *row ? query->ColumnInt(0) : 0;
}

SqliteJobStore::WriteScope::WriteScope(SqliteJobStore& store) : store_(store) {
  in_group_ = store.InOwnGroupLocked();
  if (!in_group_) {
    transaction_.emplace(store.database_);
    begin_status_ = transaction_->status();
    return;
  }
  if (store.group_failed_) {
    // After a failed write SQLite may have ended the group's transaction; a write now would
    // commit on its own.
    begin_status_ = absl::AbortedError("an earlier write of this group failed");
    return;
  }
  if (!store.group_begun_) {
    begin_status_ = store.database_.Execute("BEGIN IMMEDIATE");
    if (!begin_status_.ok()) return;
    store.group_begun_ = true;
  }
  // A savepoint, so a failed write inside the group is undone alone, as its own transaction
  // would have been.
  begin_status_ = store.database_.Execute("SAVEPOINT write_scope");
}

SqliteJobStore::WriteScope::~WriteScope() {
  if (!in_group_ || done_) return;
  store_.group_failed_ = true;
  if (!begin_status_.ok()) return;
  store_.database_.Execute("ROLLBACK TO write_scope").IgnoreError();
  store_.database_.Execute("RELEASE write_scope").IgnoreError();
}

absl::Status SqliteJobStore::WriteScope::Commit() {
  if (!in_group_) return transaction_->Commit();
  if (!begin_status_.ok()) return begin_status_;
  done_ = true;
  return store_.database_.Execute("RELEASE write_scope");
}

absl::StatusOr<std::string> SqliteJobStore::NextJobId() {
  auto lock = LockConnection();
  WriteScope transaction(*this);
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

namespace {

// The job's row: everything but the spec (its own column) and the transitions (their table).
std::string SerializeJobRow(const v1::Job& job) {
  v1::Job row = job;
  row.clear_spec();
  row.clear_transitions();
  return row.SerializeAsString();
}

}  // namespace

absl::Status SqliteJobStore::WriteJobRow(const v1::Job& job) {
  return statements_->upsert_job.Bind(1, job.id())
      .Bind(2, static_cast<int64_t>(job.state()))
      .BindBlob(3, job.spec().SerializeAsString())
      .BindBlob(4, SerializeJobRow(job))
      .Run();
}

absl::Status SqliteJobStore::InsertJob(const v1::Job& job) {
  auto lock = LockConnection();
  return WriteJobRow(job);
}

absl::Status SqliteJobStore::RecordTransition(const v1::Job& job, int64_t sequence,
                                              const v1::StateChange& change) {
  auto lock = LockConnection();
  WriteScope transaction(*this);
  if (!transaction.status().ok()) return transaction.status();
  if (absl::Status status = WriteJobRow(job); !status.ok()) return status;
  absl::Status status = statements_->insert_transition.Bind(1, change.job_id())
                            .Bind(2, sequence)
                            .Bind(3, static_cast<int64_t>(change.state()))
                            .Bind(4, change.reason())
                            .Bind(5, static_cast<int64_t>(change.attempt()))
                            .Bind(6, change.unix_millis())
                            .Bind(7, change.actor())
                            .Run();
  if (!status.ok()) return status;
  return transaction.Commit();
}

absl::Status SqliteJobStore::InsertAttempt(const std::string& job_id, int attempt,
                                           const std::vector<AssignmentRecord>& assignments,
                                           int64_t start_unix_millis) {
  auto lock = LockConnection();
  WriteScope transaction(*this);
  if (!transaction.status().ok()) return transaction.status();
  absl::StatusOr<SqliteStatement> insert = database_.Prepare(
      "INSERT INTO attempts (job_id, attempt, start_unix_millis) VALUES (?1, ?2, ?3)");
  if (!insert.ok()) return insert.status();
  absl::Status status = insert->Bind(1, job_id)
                            .Bind(2, static_cast<int64_t>(attempt))
                            .Bind(3, start_unix_millis)
                            .Run();
  if (!status.ok()) return status;
  absl::StatusOr<SqliteStatement> row = database_.Prepare(
      "INSERT INTO assignments (job_id, attempt, rank, worker_id) VALUES (?1, ?2, ?3, ?4)");
  if (!row.ok()) return row.status();
  for (const AssignmentRecord& assignment : assignments) {
    status = row->Bind(1, job_id)
                 .Bind(2, static_cast<int64_t>(attempt))
                 .Bind(3, static_cast<int64_t>(assignment.rank))
                 .Bind(4, assignment.worker_id)
                 .Run();
    if (!status.ok()) return status;
  }
  insert = absl::InternalError("released");  // finalize before COMMIT
  row = absl::InternalError("released");
  return transaction.Commit();
}

absl::Status SqliteJobStore::FinishAttempt(const std::string& job_id, int attempt, bool ok,
                                           const std::string& reason, int64_t end_unix_millis) {
  auto lock = LockConnection();
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

absl::Status SqliteJobStore::RecordStep(const v1::Job& job, int64_t sequence,
                                        const v1::StepReport& aggregate) {
  // Serialized before the lock: the writer thread may want the connection meanwhile.
  const std::string report = aggregate.SerializeAsString();
  const std::string row = SerializeJobRow(job);
  auto lock = LockConnection();
  WriteScope transaction(*this);
  if (!transaction.status().ok()) return transaction.status();
  absl::Status status = statements_->insert_step_event.Bind(1, job.id())
                            .Bind(2, sequence)
                            .Bind(3, static_cast<int64_t>(aggregate.attempt()))
                            .Bind(4, aggregate.step())
                            .BindBlob(5, report)
                            .Run();
  if (!status.ok()) return status;
  status = statements_->update_job_progress.Bind(1, job.id())
               .Bind(2, static_cast<int64_t>(job.state()))
               .BindBlob(3, row)
               .Run();
  if (!status.ok()) return status;
  return transaction.Commit();
}

}  // namespace fsdpd::server
