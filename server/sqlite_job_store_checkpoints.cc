// The SQLite job store's checkpoints table: what `fsdpctl checkpoints` lists and what an export
// of a checkpoint resolves against.
#include <set>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "server/sqlite_job_store.h"

namespace fsdpd::server {

absl::Status SqliteJobStore::RecordCheckpoint(const CheckpointRecord& record,
                                              const std::vector<int64_t>& committed_steps) {
  auto lock = LockConnection();
  WriteScope transaction(*this);
  if (!transaction.status().ok()) return transaction.status();
  absl::StatusOr<SqliteStatement> insert = database_.Prepare(
      "INSERT OR REPLACE INTO checkpoints (job_id, step, commit_unix_millis, size_bytes, attempt, "
      "world_size, hosts) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)");
  if (!insert.ok()) return insert.status();
  absl::Status status = insert->Bind(1, record.job_id)
                            .Bind(2, record.step)
                            .Bind(3, record.commit_unix_millis)
                            .Bind(4, record.size_bytes)
                            .Bind(5, static_cast<int64_t>(record.attempt))
                            .Bind(6, static_cast<int64_t>(record.world_size))
                            .Bind(7, absl::StrJoin(record.hosts, "\n"))
                            .Run();
  if (!status.ok()) return status;
  absl::StatusOr<SqliteStatement> steps =
      database_.Prepare("SELECT step FROM checkpoints WHERE job_id = ?1");
  if (!steps.ok()) return steps.status();
  steps->Bind(1, record.job_id);
  const std::set<int64_t> kept(committed_steps.begin(), committed_steps.end());
  std::vector<int64_t> pruned;
  while (true) {
    absl::StatusOr<bool> row = steps->Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
    const int64_t step = steps->ColumnInt(0);
    if (step != record.step && kept.count(step) == 0) pruned.push_back(step);
  }
  absl::StatusOr<SqliteStatement> remove =
      database_.Prepare("DELETE FROM checkpoints WHERE job_id = ?1 AND step = ?2");
  if (!remove.ok()) return remove.status();
  for (int64_t step : pruned) {
    status = remove->Bind(1, record.job_id).Bind(2, step).Run();
    if (!status.ok()) return status;
  }
  insert = absl::InternalError("released");  // finalize before COMMIT
  steps = absl::InternalError("released");
  remove = absl::InternalError("released");
  return transaction.Commit();
}

absl::StatusOr<std::vector<CheckpointRecord>> SqliteJobStore::LoadCheckpoints(
    const std::string& job_id) {
  auto lock = LockConnection();
  absl::StatusOr<SqliteStatement> select = database_.Prepare(
      "SELECT step, commit_unix_millis, size_bytes, attempt, world_size, hosts FROM checkpoints "
      "WHERE job_id = ?1 ORDER BY step DESC");
  if (!select.ok()) return select.status();
  select->Bind(1, job_id);
  std::vector<CheckpointRecord> records;
  while (true) {
    absl::StatusOr<bool> row = select->Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
    CheckpointRecord record;
    record.job_id = job_id;
    record.step = select->ColumnInt(0);
    record.commit_unix_millis = select->ColumnInt(1);
    record.size_bytes = select->ColumnInt(2);
    record.attempt = static_cast<int>(select->ColumnInt(3));
    record.world_size = static_cast<int>(select->ColumnInt(4));
    record.hosts = absl::StrSplit(select->ColumnText(5), '\n', absl::SkipEmpty());
    records.push_back(std::move(record));
  }
  return records;
}

}  // namespace fsdpd::server
