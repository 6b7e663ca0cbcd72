// The worker's health: its checkpoint root (probed at start, after a failed attempt and every
// 30 s while unwritable, with its identity read or made each time) and the watchdog that gives up
// on an attempt that does not end after its cancellation. Both reach the coordinator as
// WorkerHealth, at registration and in heartbeats.
#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "worker/checkpoint/root_probe.h"
#include "worker/session.h"

namespace fsdpd {
namespace {

using Clock = std::chrono::steady_clock;

// How often a worker kept out by an unwritable checkpoint root looks again.
constexpr std::chrono::seconds kRootRecheckInterval(30);

}  // namespace

v1::WorkerHealth WorkerSession::Health() {
  std::lock_guard<std::mutex> lock(health_mutex_);
  return health_;
}

void WorkerSession::CheckCheckpointRoot() {
  absl::Status writable = ProbeCheckpointRoot(config_.checkpoint_root);
  // A root without an identity cannot be matched with the other ranks' roots: unfit as well.
  absl::StatusOr<std::string> identity = writable.ok()
                                             ? ReadOrCreateRootIdentity(config_.checkpoint_root)
                                             : absl::StatusOr<std::string>(std::string());
  if (!identity.ok()) writable = identity.status();
  const std::string error = writable.ok() ? "" : std::string(writable.message());
  const std::string root_id = identity.ok() ? *identity : "";
  bool error_changed = false;
  {
    std::lock_guard<std::mutex> lock(health_mutex_);
    if (health_.checkpoint_root_error() == error && health_.checkpoint_root_id() == root_id) {
      return;
    }
    error_changed = health_.checkpoint_root_error() != error;
    health_.set_checkpoint_root_error(error);
    health_.set_checkpoint_root_id(root_id);
  }
  if (!root_id.empty()) {
    spdlog::info("the checkpoint root {} has identity {}", config_.checkpoint_root, root_id);
  }
  if (!error_changed) {
    outbox_.Wake();
    return;
  }
  if (error.empty()) {
    spdlog::info("the checkpoint root {} is writable again", config_.checkpoint_root);
  } else {
    spdlog::error("{}; the coordinator gives this worker no job until it is", error);
  }
  outbox_.Wake();
}

void WorkerSession::WatchLoop() {
  const auto period = std::clamp<std::chrono::milliseconds>(
      config_.cancel_grace / 10, std::chrono::milliseconds(50), std::chrono::milliseconds(1000));
  Clock::time_point next_root_check = Clock::now() + kRootRecheckInterval;
  std::unique_lock<std::mutex> lock(watch_mutex_);
  while (!watch_stop_.load()) {
    watch_changed_.wait_for(lock, period, [&] { return watch_stop_.load(); });
    if (watch_stop_.load()) break;
    lock.unlock();
    CheckWedged();
    if (Clock::now() >= next_root_check) {
      next_root_check = Clock::now() + kRootRecheckInterval;
      RecheckUnwritableRoot();
    }
    lock.lock();
  }
}

void WorkerSession::RecheckUnwritableRoot() {
  if (Health().checkpoint_root_error().empty()) return;
  {
    // Such a worker gets no job; one it still runs (from before) probes after it fails.
    std::lock_guard<std::mutex> lock(state_mutex_);
    if (job_ && !job_->Finished()) return;
  }
  CheckCheckpointRoot();
}

void WorkerSession::CheckWedged() {
  if (wedged_.load()) return;
  std::string reason;
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    if (!job_ || job_->Finished()) return;
    const std::optional<Clock::time_point> cancelled = job_->CancelledAt();
    if (!cancelled.has_value() || Clock::now() - *cancelled < config_.cancel_grace) return;
    const std::string activity = job_->LastActivity();
    reason =
        absl::StrCat(job_->job_id(), " attempt ", job_->attempt(), " rank ", job_->rank(),
                     " did not end within ", config_.cancel_grace.count(),
                     " ms (--cancel-grace) of its cancellation (", job_->CancelReason(),
                     "); its last step: ", activity.empty() ? "starting" : activity,
                     ". The worker takes no more jobs and exits for its supervisor to restart it");
  }
  spdlog::error("{}", reason);
  {
    std::lock_guard<std::mutex> lock(health_mutex_);
    health_.set_unhealthy(reason);
  }
  wedged_.store(true);
  // The stream sends the report, then closes (ReadyToClose); Run then returns.
  Shutdown();
  { std::lock_guard<std::mutex> lock(sleep_mutex_); }
  sleep_changed_.notify_all();
}

void WorkerSession::EndJob(std::unique_ptr<JobRun> job) {
  if (!job) return;
  job->Cancel("the worker is shutting down");
  std::unique_lock<std::mutex> lock(sleep_mutex_);
  // The run sets Finished without telling this session, so look every 20 ms; the watchdog
  // notifies when it gives up.
  while (!job->Finished() && !wedged_.load()) {
    sleep_changed_.wait_for(lock, std::chrono::milliseconds(20));
  }
  lock.unlock();
  if (job->Finished()) {
    job->Join();
    return;
  }
  // Blocked where nothing can interrupt it: its thread outlives this session, and the process
  // must end without destroying it.
  spdlog::error("job {} attempt {}: abandoning its blocked thread", job->job_id(), job->attempt());
  static_cast<void>(job.release());
}

}  // namespace fsdpd
