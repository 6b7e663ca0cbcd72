// The JobStore on SQLite (WAL mode). Per-rank step reports and logs are buffered and written in
// one transaction per batch; everything else is written before the call returns.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "server/config.h"
#include "server/job_store.h"
#include "server/sqlite_database.h"

namespace fsdpd::server {

class SqliteJobStore : public JobStore {
 public:
  static absl::StatusOr<std::unique_ptr<SqliteJobStore>> Open(const JobStoreConfig& config);
  ~SqliteJobStore() override;

  absl::StatusOr<std::string> NextJobId() override;
  absl::Status InsertJob(const v1::Job& job) override;
  absl::Status RecordTransition(const v1::Job& job, int64_t sequence,
                                const v1::StateChange& change) override;
  absl::StatusOr<std::vector<v1::Job>> LoadJobs() override;

  absl::Status InsertAttempt(const std::string& job_id, int attempt,
                             const std::vector<AssignmentRecord>& assignments,
                             int64_t start_unix_millis) override;
  absl::Status FinishAttempt(const std::string& job_id, int attempt, bool ok,
                             const std::string& reason, int64_t end_unix_millis) override;
  absl::StatusOr<std::vector<AssignmentRecord>> LoadAssignments(const std::string& job_id,
                                                                int attempt) override;

  absl::Status RecordStep(const v1::Job& job, int64_t sequence,
                          const v1::StepReport& aggregate) override;
  absl::Status AppendStepReport(const v1::StepReport& report) override;
  absl::Status AppendLog(const v1::LogLine& line) override;

  absl::StatusOr<std::vector<v1::StepReport>> LoadStepReports(const std::string& job_id) override;
  absl::StatusOr<std::vector<StoredEvent>> LoadEvents(const std::string& job_id) override;
  absl::StatusOr<std::vector<v1::LogLine>> LoadLogs(const std::string& job_id,
                                                    int64_t tail) override;

  absl::Status Flush() override;

 private:
  SqliteJobStore(JobStoreConfig config, SqliteDatabase database);
  absl::Status WriteJobRow(const v1::Job& job);
  absl::Status FlushLocked();
  absl::Status MaybeFlushLocked();
  size_t PendingRowsLocked() const;

  const JobStoreConfig config_;
  std::mutex mutex_;
  SqliteDatabase database_;
  std::vector<v1::StepReport> pending_reports_;
  std::vector<v1::LogLine> pending_logs_;
};

}  // namespace fsdpd::server
