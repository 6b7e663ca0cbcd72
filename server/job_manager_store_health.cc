// The job manager when the store cannot write (a full disk, a read-only volume): nothing that
// failed to commit is applied. A run of changes is grouped into one store transaction; if any
// write of the run fails, the transaction is rolled back and so is the run in memory (records,
// their workers' assignments, the rendezvous scope), its notifications and messages to workers
// are dropped, and worker messages are held in order until Tick finds the store writable again.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "server/job_manager.h"
#include "spdlog/spdlog.h"

namespace fsdpd::server {
namespace {

// Held worker messages are kept in memory; past this, step reports and log lines are dropped
// (their workers keep them unconfirmed and send them again on their next session).
constexpr size_t kMaxHeldMessages = 200000;

}  // namespace

void JobManager::LogStoreError(const absl::Status& status, const char* what) {
  if (status.ok()) return;
  spdlog::error("job store: {}: {}", what, status.ToString());
  store_errors_.fetch_add(1);
  if (deferring_publish_) run_failed_ = true;
  {
    std::lock_guard<std::mutex> lock(view_mutex_);
    store_error_ = absl::StrCat(what, ": ", status.message());
  }
  store_writable_.store(false);
}

JobManager::StoreHealth JobManager::GetStoreHealth() const {
  StoreHealth health;
  health.writable = store_writable_.load();
  health.errors = store_errors_.load();
  health.held_messages = held_count_.load();
  std::lock_guard<std::mutex> lock(view_mutex_);
  health.last_error = store_error_;
  return health;
}

absl::Status JobManager::StoreUnavailable() const {
  std::lock_guard<std::mutex> lock(view_mutex_);
  return absl::UnavailableError(
      absl::StrCat("the job store cannot write (", store_error_,
                   "); the coordinator accepts no changes until it can (see docs/operations.md)"));
}

void JobManager::SnapshotLocked(const JobRecord& record) {
  if (!deferring_publish_ || snapshots_.count(&record) != 0) return;
  snapshots_[&record] = {record.job, record.next_sequence, record.active};
}

void JobManager::RollBackRunLocked() {
  for (auto& [pointer, snapshot] : snapshots_) {
    JobRecord& record = *const_cast<JobRecord*>(pointer);
    const std::string& job_id = record.job.id();
    const std::optional<ActiveAttempt>& now = record.active;
    const std::optional<ActiveAttempt>& before = snapshot.active;
    const bool same = now.has_value() && before.has_value() && now->attempt == before->attempt;
    if (now.has_value() && !same) {
      // An attempt this run started: its workers are free again.
      for (const std::string& worker_id : now->worker_ids) {
        workers_.Release(worker_id, job_id, now->attempt);
      }
      rendezvous_.DropScope(job_id, now->attempt);
    }
    if (before.has_value() && !same) {
      // An attempt this run ended: its ranks that had not finished are assigned again.
      rendezvous_.OpenScope(job_id, before->attempt);
      for (size_t rank = 0; rank < before->worker_ids.size(); ++rank) {
        if (before->finished[rank]) continue;
        workers_.Assign(before->worker_ids[rank],
                        {job_id, before->attempt, static_cast<int>(rank)});
      }
    }
    record.job = std::move(snapshot.job);
    record.next_sequence = snapshot.next_sequence;
    record.active = std::move(snapshot.active);
  }
  snapshots_.clear();
}

bool JobManager::RunGroupedLocked(const std::function<void()>& body) {
  store_.BeginGroup();
  deferring_publish_ = true;
  run_failed_ = false;
  body();
  if (run_failed_) {
    store_.AbortGroup();
  } else {
    LogStoreError(store_.EndGroup(), "commit");
  }
  deferring_publish_ = false;
  if (run_failed_) {
    RollBackRunLocked();
    unpublished_.clear();
    held_notifications_.clear();
    held_sends_.clear();
    return false;
  }
  snapshots_.clear();
  std::sort(unpublished_.begin(), unpublished_.end());
  unpublished_.erase(std::unique(unpublished_.begin(), unpublished_.end()), unpublished_.end());
  for (const JobRecord* record : unpublished_) PublishLocked(*record);
  unpublished_.clear();
  std::vector<std::pair<std::string, v1::CoordinatorMessage>> sends = std::move(held_sends_);
  held_sends_.clear();
  for (const auto& [worker_id, message] : sends) workers_.Send(worker_id, message);
  SendHeldNotificationsLocked();
  return true;
}

void JobManager::HoldLocked(const std::vector<WorkerMessageRef>& messages) {
  for (const WorkerMessageRef& ref : messages) {
    const v1::WorkerMessage& message = *ref.message;
    if (message.has_heartbeat()) continue;  // liveness was stamped on arrival
    if (held_messages_.size() >= kMaxHeldMessages && (message.has_step() || message.has_log())) {
      continue;
    }
    held_messages_.emplace_back(*ref.worker_id, message);
  }
  held_count_.store(static_cast<int64_t>(held_messages_.size()));
}

bool JobManager::RetryHeldLocked() {
  if (held_messages_.empty()) return true;
  std::deque<std::pair<std::string, v1::WorkerMessage>> held = std::move(held_messages_);
  held_messages_.clear();
  std::vector<WorkerMessageRef> refs;
  refs.reserve(held.size());
  for (const auto& [worker_id, message] : held) refs.push_back({&worker_id, &message});
  const bool stored = RunGroupedLocked([&] {
    for (const WorkerMessageRef& ref : refs) OnWorkerMessageLocked(*ref.worker_id, *ref.message);
  });
  if (!stored) {
    held_messages_ = std::move(held);
  } else {
    spdlog::info("job store: writable again; {} held worker messages stored", held.size());
  }
  held_count_.store(static_cast<int64_t>(held_messages_.size()));
  return stored;
}

// While the store cannot write: tries what is held, or a probe write, and says whether the
// store takes writes again.
bool JobManager::RecoverStoreLocked() {
  if (store_writable_.load()) return true;
  if (!held_messages_.empty()) {
    if (!RetryHeldLocked()) return false;
  } else if (absl::Status probe = store_.Flush(); !probe.ok()) {
    LogStoreError(probe, "flush while recovering");
    return false;
  }
  store_writable_.store(true);
  spdlog::info("job store: writes succeed again");
  return true;
}

}  // namespace fsdpd::server
