// The JobStore on SQLite (WAL mode). Per-rank step reports and logs are buffered and written in
// one transaction per batch; everything else is written before the call returns.
//
// Appending a row only queues it under a small lock: a full batch is written by the store's own
// writer thread, so the caller (the job manager, under its lock) never waits for a batch write.
// Batches go in chunks of batch_rows rows, one transaction each, so a synchronous write (a
// transition, an aggregated step) waits for at most one chunk.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
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
  absl::StatusOr<int64_t> AppendStepReport(const v1::StepReport& report) override;
  int64_t StoredStepReports() const override;
  int64_t QueuedRows() const override;
  absl::StatusOr<int64_t> AppendLog(const v1::LogLine& line) override;
  int64_t StoredLogs() const override;

  absl::StatusOr<std::vector<v1::StepReport>> LoadStepReports(const std::string& job_id) override;
  absl::StatusOr<std::vector<StoredEvent>> LoadEvents(const std::string& job_id,
                                                      int64_t max_steps = -1) override;
  absl::StatusOr<std::vector<v1::LogLine>> LoadLogs(const std::string& job_id,
                                                    int64_t tail) override;
  absl::StatusOr<int64_t> LogBytes(const std::string& job_id) override;

  absl::Status RecordCheckpoint(const CheckpointRecord& record,
                                const std::vector<int64_t>& committed_steps) override;
  absl::StatusOr<std::vector<CheckpointRecord>> LoadCheckpoints(const std::string& job_id) override;

  absl::Status Flush() override;
  void BeginGroup() override;
  absl::Status EndGroup() override;
  void AbortGroup() override;
  // Fault injection for tests: PRAGMA max_page_count on the connection, so writes that need
  // more pages fail with SQLITE_FULL as on a full disk. Returns the page count now.
  absl::StatusOr<int64_t> LimitPages(int64_t max_pages);

 private:
  // The statements of the write path, prepared once.
  struct Statements {
    SqliteStatement upsert_job;
    SqliteStatement update_job_progress;
    SqliteStatement insert_transition;
    SqliteStatement insert_step_event;
    SqliteStatement insert_step_report;
    SqliteStatement insert_log;
    SqliteStatement prune_step_reports;
  };

  // A write of its own: a transaction, or a savepoint inside the caller's open group.
  class WriteScope {
   public:
    explicit WriteScope(SqliteJobStore& store);
    ~WriteScope();
    const absl::Status& status() const { return begin_status_; }
    absl::Status Commit();

   private:
    SqliteJobStore& store_;
    std::optional<SqliteTransaction> transaction_;
    absl::Status begin_status_;
    bool in_group_ = false;
    bool done_ = false;
  };

  SqliteJobStore(JobStoreConfig config, SqliteDatabase database);
  // Locks the connection; waits while another thread's group is open.
  std::unique_lock<std::mutex> LockConnection();
  bool InOwnGroupLocked() const;
  absl::Status PrepareStatements();
  absl::Status WriteJobRow(const v1::Job& job);
  // Writes everything queued. The caller holds mutex_.
  absl::Status FlushLocked();
  void FlushBeforeReadLocked();
  // Takes up to max_rows queued rows and writes them in one transaction; on failure puts them
  // back in front of the queue. The caller holds mutex_. Returns how many rows it wrote.
  absl::StatusOr<size_t> WriteChunkLocked(size_t max_rows);
  // Inside WriteChunkLocked's transaction: for each rank that has reports in `reports`,
  // deletes its reports that fall out of config_.rank_report_steps behind its newest one. The
  // caller holds mutex_.
  absl::Status PruneStepReportsLocked(const std::vector<v1::StepReport>& reports);
  void RunWriter();
  size_t PendingRowsLocked() const;
  // Queues a row for the writer thread and wakes it when a batch is full; returns the row's
  // number among the rows of its kind (`appended` counts them).
  template <typename Row>
  int64_t Enqueue(std::deque<Row>& queue, int64_t& appended, const Row& row);

  const JobStoreConfig config_;
  // Guards the connection and the statements.
  std::mutex mutex_;
  SqliteDatabase database_;
  std::optional<Statements> statements_;
  // The open group (BeginGroup..EndGroup): its thread, and whether its BEGIN was sent (at the
  // first write, so a run without writes costs nothing).
  bool group_open_ = false;
  bool group_begun_ = false;
  bool group_failed_ = false;  // a write of the open group failed: the group stores nothing
  std::thread::id group_owner_;
  std::condition_variable group_closed_;

  // Lock order: mutex_ before pending_mutex_. Appenders take pending_mutex_ only; rows leave
  // the queue only under both, so whoever holds mutex_ sees each row either written or queued.
  mutable std::mutex pending_mutex_;
  std::condition_variable batch_ready_;
  std::deque<v1::StepReport> pending_reports_;
  std::deque<v1::LogLine> pending_logs_;
  int64_t appended_reports_ = 0;  // under pending_mutex_
  int64_t appended_logs_ = 0;     // under pending_mutex_
  // Prefixes of the appended ones.
  std::atomic<int64_t> stored_reports_{0};
  std::atomic<int64_t> stored_logs_{0};
  bool stopping_ = false;
  std::thread writer_;
};

}  // namespace fsdpd::server
