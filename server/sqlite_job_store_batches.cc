// The batched side of the SQLite job store: per-rank step reports and log lines are queued and
// written by the store's writer thread in chunks of batch_rows rows, one transaction each; the
// same transaction deletes the per-rank reports that fall out of rank_report_steps.
#include <algorithm>
#include <iterator>
#include <map>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "base/status_macros.h"
#include "server/sqlite_job_store.h"
#include "spdlog/spdlog.h"

namespace fsdpd::server {

size_t SqliteJobStore::PendingRowsLocked() const {
  return pending_reports_.size() + pending_logs_.size();
}

template <typename Row>
int64_t SqliteJobStore::Enqueue(std::deque<Row>& queue, int64_t& appended, const Row& row) {
  bool full = false;
  int64_t number = 0;
  {
    std::lock_guard<std::mutex> lock(pending_mutex_);
    queue.push_back(row);
    number = ++appended;
    full = PendingRowsLocked() >= static_cast<size_t>(config_.batch_rows);
  }
  if (full) batch_ready_.notify_one();
  return number;
}

absl::StatusOr<int64_t> SqliteJobStore::AppendStepReport(const v1::StepReport& report) {
  return Enqueue(pending_reports_, appended_reports_, report);
}

int64_t SqliteJobStore::StoredStepReports() const { return stored_reports_.load(); }

int64_t SqliteJobStore::QueuedRows() const {
  std::lock_guard<std::mutex> lock(pending_mutex_);
  return static_cast<int64_t>(PendingRowsLocked());
}

absl::StatusOr<int64_t> SqliteJobStore::AppendLog(const v1::LogLine& line) {
  return Enqueue(pending_logs_, appended_logs_, line);
}

int64_t SqliteJobStore::StoredLogs() const { return stored_logs_.load(); }

absl::Status SqliteJobStore::Flush() {
  auto lock = LockConnection();
  return FlushLocked();
}

absl::Status SqliteJobStore::FlushLocked() {
  while (true) {
    absl::StatusOr<size_t> written = WriteChunkLocked(static_cast<size_t>(config_.batch_rows));
    if (!written.ok()) return written.status();
    if (*written == 0) return absl::OkStatus();
  }
}

absl::StatusOr<size_t> SqliteJobStore::WriteChunkLocked(size_t max_rows) {
  std::vector<v1::StepReport> reports;
  std::vector<v1::LogLine> logs;
  {
    std::lock_guard<std::mutex> lock(pending_mutex_);
    const size_t report_count = std::min(max_rows, pending_reports_.size());
    const size_t log_count = std::min(max_rows - report_count, pending_logs_.size());
    reports.assign(std::make_move_iterator(pending_reports_.begin()),
                   std::make_move_iterator(pending_reports_.begin() + report_count));
    pending_reports_.erase(pending_reports_.begin(), pending_reports_.begin() + report_count);
    logs.assign(std::make_move_iterator(pending_logs_.begin()),
                std::make_move_iterator(pending_logs_.begin() + log_count));
    pending_logs_.erase(pending_logs_.begin(), pending_logs_.begin() + log_count);
  }
  if (reports.empty() && logs.empty()) return 0;
  auto write = [&]() -> absl::Status {
    WriteScope transaction(*this);
    if (!transaction.status().ok()) return transaction.status();
    for (const v1::StepReport& report : reports) {
      absl::Status status = statements_->insert_step_report.Bind(1, report.job_id())
                                .Bind(2, static_cast<int64_t>(report.attempt()))
                                .Bind(3, static_cast<int64_t>(report.rank()))
                                .Bind(4, report.step())
                                .BindBlob(5, report.SerializeAsString())
                                .Run();
      if (!status.ok()) return status;
    }
    if (absl::Status pruned = PruneStepReportsLocked(reports); !pruned.ok()) return pruned;
    for (const v1::LogLine& line : logs) {
      absl::Status status = statements_->insert_log.Bind(1, line.job_id())
                                .Bind(2, static_cast<int64_t>(line.attempt()))
                                .Bind(3, static_cast<int64_t>(line.rank()))
                                .Bind(4, line.unix_millis())
                                .Bind(5, line.level())
                                .Bind(6, line.text())
                                .Bind(7, line.sequence())
                                .Run();
      if (!status.ok()) return status;
    }
    return transaction.Commit();
  };
  if (absl::Status status = write(); !status.ok()) {
    // Nothing accepted is dropped: the rows go back in front, in order, for the next attempt.
    std::lock_guard<std::mutex> lock(pending_mutex_);
    pending_reports_.insert(pending_reports_.begin(), std::make_move_iterator(reports.begin()),
                            std::make_move_iterator(reports.end()));
    pending_logs_.insert(pending_logs_.begin(), std::make_move_iterator(logs.begin()),
                         std::make_move_iterator(logs.end()));
    return status;
  }
  // Chunks take the oldest queued rows of each kind and a failed one puts them back in front, so
  // the stored ones are always the first ones appended.
  stored_reports_ += static_cast<int64_t>(reports.size());
  stored_logs_ += static_cast<int64_t>(logs.size());
  return reports.size() + logs.size();
}

absl::Status SqliteJobStore::PruneStepReportsLocked(const std::vector<v1::StepReport>& reports) {
  const int64_t keep = config_.rank_report_steps;
  if (keep <= 0) return absl::OkStatus();
  // The newest step of each rank of each job attempt in this chunk. Pruning every chunk keeps
  // the work in step with the inserts: each delete is an index range of about as many rows as
  // the rank added since its last chunk.
  std::map<std::tuple<std::string, int32_t, int32_t>, int64_t> newest;
  for (const v1::StepReport& report : reports) {
    int64_t& step = newest[{report.job_id(), report.attempt(), report.rank()}];
    step = std::max(step, report.step());
  }
  for (const auto& [rank, step] : newest) {
    if (step <= keep) continue;
    FSDPD_RETURN_IF_ERROR(statements_->prune_step_reports.Bind(1, std::get<0>(rank))
                              .Bind(2, static_cast<int64_t>(std::get<1>(rank)))
                              .Bind(3, static_cast<int64_t>(std::get<2>(rank)))
                              .Bind(4, step - keep)
                              .Run());
  }
  return absl::OkStatus();
}

void SqliteJobStore::RunWriter() {
  const size_t batch = static_cast<size_t>(config_.batch_rows);
  std::unique_lock<std::mutex> pending(pending_mutex_);
  while (true) {
    batch_ready_.wait(pending, [&] { return stopping_ || PendingRowsLocked() >= batch; });
    if (stopping_) return;
    pending.unlock();
    absl::Status status;
    {
      // One chunk per hold of the connection, so synchronous writes wait for one chunk at most.
      auto lock = LockConnection();
      status = WriteChunkLocked(batch).status();
    }
    if (!status.ok()) {
      spdlog::error("job store: batch write failed (rows kept, retried): {}", status.ToString());
      std::this_thread::sleep_for(config_.flush_interval);
    }
    pending.lock();
  }
}
}  // namespace fsdpd::server
