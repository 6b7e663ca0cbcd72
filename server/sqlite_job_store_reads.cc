// The read side of the SQLite job store. Every load writes the buffered rows first, so a
// reader always sees what was accepted.
#include <map>

#include "absl/strings/str_cat.h"
#include "server/sqlite_job_store.h"
#include "spdlog/spdlog.h"

namespace fsdpd::server {

// Reads see what is queued once it is written; when it cannot be (a full disk) they still
// answer with what is stored, and the queued rows stay queued.
void SqliteJobStore::FlushBeforeReadLocked() {
  if (absl::Status status = FlushLocked(); !status.ok()) {
    spdlog::warn("job store: reading without the queued rows: {}", status.ToString());
  }
}

namespace {

template <typename Message>
absl::StatusOr<Message> ParseBlob(const std::string& bytes, const char* what) {
  Message message;
  if (!message.ParseFromString(bytes)) {
    return absl::DataLossError(absl::StrCat("stored ", what, " cannot be parsed"));
  }
  return message;
}

}  // namespace

absl::StatusOr<std::vector<v1::Job>> SqliteJobStore::LoadJobs() {
  auto lock = LockConnection();
  FlushBeforeReadLocked();
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
      "SELECT job_id, state, reason, attempt, unix_millis, actor FROM transitions "
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
    change->set_actor(transitions->ColumnText(5));
  }
  return jobs;
}

absl::StatusOr<std::vector<v1::StepReport>> SqliteJobStore::LoadStepReports(
    const std::string& job_id) {
  auto lock = LockConnection();
  FlushBeforeReadLocked();
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

absl::StatusOr<std::vector<StoredEvent>> SqliteJobStore::LoadEvents(const std::string& job_id,
                                                                    int64_t max_steps) {
  auto lock = LockConnection();
  FlushBeforeReadLocked();
  // LIMIT -1 is SQLite's "no limit".
  absl::StatusOr<SqliteStatement> select = database_.Prepare(
      "SELECT sequence, state, reason, attempt, unix_millis, NULL, actor FROM transitions "
      "WHERE job_id = ?1 "
      "UNION ALL SELECT * FROM (SELECT sequence, NULL, NULL, NULL, NULL, report, NULL "
      "FROM step_events WHERE job_id = ?1 ORDER BY sequence DESC LIMIT ?2) ORDER BY 1");
  if (!select.ok()) return select.status();
  select->Bind(1, job_id).Bind(2, max_steps < 0 ? int64_t{-1} : max_steps);
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
      change->set_actor(select->ColumnText(6));
    }
    events.push_back(std::move(stored));
  }
  return events;
}

absl::StatusOr<std::vector<v1::LogLine>> SqliteJobStore::LoadLogs(const std::string& job_id,
                                                                  int64_t tail) {
  auto lock = LockConnection();
  FlushBeforeReadLocked();
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

absl::StatusOr<int64_t> SqliteJobStore::LogBytes(const std::string& job_id) {
  auto lock = LockConnection();
  FlushBeforeReadLocked();
  absl::StatusOr<SqliteStatement> select = database_.Prepare(
      "SELECT COALESCE(SUM(LENGTH(CAST(text AS BLOB))), 0) FROM logs WHERE job_id = ?1");
  if (!select.ok()) return select.status();
  select->Bind(1, job_id);
  absl::StatusOr<bool> row = select->Step();
  if (!row.ok()) return row.status();
  return *row ? select->ColumnInt(0) : 0;
}

absl::StatusOr<std::vector<AssignmentRecord>> SqliteJobStore::LoadAssignments(
    const std::string& job_id, int attempt) {
  auto lock = LockConnection();
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

}  // namespace fsdpd::server
