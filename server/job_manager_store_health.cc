// The job manager when the store cannot write (a full disk, a read-only volume): nothing that
// failed to commit is applied (the grouped run that rolls back is in job_manager_sending.cc), and
// worker messages are held in order until Tick finds the store writable again.
#include <thread>

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

void JobManager::HoldLocked(const std::vector<WorkerMessageRef>& messages) {
  for (const WorkerMessageRef& ref : messages) {
    const v1::WorkerMessage& message = *ref.message;
    if (message.has_heartbeat()) {
      // Liveness was stamped on arrival; the reports it carries are held one by one.
      for (const v1::StepReport& report : message.heartbeat().steps()) {
        if (held_messages_.size() >= kMaxHeldMessages) break;
        v1::WorkerMessage step;
        *step.mutable_step() = report;
        held_messages_.emplace_back(*ref.worker_id, std::move(step));
      }
      continue;
    }
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

void JobManager::WaitForStoreToCatchUp() {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (store_writable_.load() && store_.QueuedRows() > kMaxQueuedStoreRows &&
         std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

}  // namespace fsdpd::server
