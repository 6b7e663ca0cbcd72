// Tick: the deadlines the job manager enforces. Silent workers are lost and their attempts
// fail, attempts whose workers do not come back after a coordinator restart fail, and so do
// SCHEDULED attempts not accepted by every rank, or showing no progress, before their deadline;
// then waiting jobs are scheduled, and those kept off workers that cannot checkpoint say so.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "server/job_manager.h"
#include "spdlog/spdlog.h"

namespace fsdpd::server {

void JobManager::Tick() {
  // A tick that waits long for the lock is a stall: the job manager handled no message then.
  const auto asked = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(mutex_);
  lag_.NoteStall(std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - asked));
  if (shutting_down_) return;
  // Nothing is expired or scheduled while the store cannot write: it could not be stored.
  if (!RecoverStoreLocked()) return;
  RunGroupedLocked([this] { TickLocked(); });
}

void JobManager::SchedulePass() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (shutting_down_ || !store_writable_.load()) return;
  RunGroupedLocked([this] { ScheduleLocked(); });
}

void JobManager::SetSchedulingWaker(std::function<void()> wake) {
  std::lock_guard<std::mutex> lock(mutex_);
  wake_scheduler_ = std::move(wake);
}

void JobManager::TickLocked() {
  const std::chrono::milliseconds lag = lag_.Take();
  PaceReportsLocked(lag);
  ExpireSilentWorkersLocked(lag);
  FailAttemptsOnLostWorkersLocked();
  const Clock::time_point now = now_();
  for (auto& [id, record] : jobs_) {
    if (!record.active.has_value() || !record.active->recovery_deadline.has_value()) continue;
    ActiveAttempt& active = *record.active;
    size_t rank = 0;
    while (rank < active.reattached.size() && (active.reattached[rank] || active.finished[rank])) {
      ++rank;
    }
    if (rank == active.reattached.size()) {
      active.recovery_deadline.reset();
      continue;
    }
    if (now < *active.recovery_deadline) continue;
    FailAttemptLocked(record, absl::StrCat("rank ", rank, " (worker ", active.worker_ids[rank],
                                           ") did not come back after a coordinator restart"));
  }
  ExpireUnstartedAttemptsLocked();
  ScheduleLocked();
}

// A worker found lost while a failed write was undone still holds its rank: fail it now. Only a
// lost worker, or a change of the fleet (a worker forgotten), gives this anything to find: on
// 10,000 workers, looking up every rank's worker each tick held the lock for most of the tick.
void JobManager::FailAttemptsOnLostWorkersLocked() {
  const std::shared_ptr<const std::vector<FleetWorker>> fleet = workers_.Fleet();
  if (fleet != lost_checked_fleet_) {
    lost_checked_fleet_ = fleet;
    fleet_has_lost_ = std::any_of(fleet->begin(), fleet->end(), [](const FleetWorker& worker) {
      return worker.state == FleetWorker::State::kLost;
    });
  } else if (!fleet_has_lost_) {
    return;
  }
  // The fleet is in id order (the registry's map).
  const auto lost_or_gone = [&fleet](const std::string& worker_id) {
    const auto found = std::lower_bound(
        fleet->begin(), fleet->end(), worker_id,
        [](const FleetWorker& worker, const std::string& id) { return worker.id < id; });
    return found == fleet->end() || found->id != worker_id ||
           found->state == FleetWorker::State::kLost;
  };
  for (auto& [id, record] : jobs_) {
    if (!record.active.has_value() || record.active->recovery_deadline.has_value()) continue;
    const ActiveAttempt& active = *record.active;
    for (size_t rank = 0; rank < active.worker_ids.size(); ++rank) {
      if (active.finished[rank]) continue;
      if (!lost_or_gone(active.worker_ids[rank])) continue;
      FailAttemptLocked(record, absl::StrCat("worker ", active.worker_ids[rank], " lost"));
      break;
    }
  }
}

std::chrono::milliseconds JobManager::StartTimeout() const {
  if (config_.start_timeout.count() > 0) return config_.start_timeout;
  return workers_.config().heartbeat_timeout + RendezvousConfig{}.default_get_timeout;
}

void JobManager::NoteProgressLocked(JobRecord& record, int rank, const std::string& what) {
  if (!record.active.has_value() || record.job.state() != v1::SCHEDULED) return;
  ActiveAttempt& active = *record.active;
  if (rank < 0 || rank >= static_cast<int>(active.worker_ids.size())) return;
  const Clock::time_point now = now_();
  active.progress.resize(active.worker_ids.size());
  active.progressed_at.resize(active.worker_ids.size(), now);
  active.progress[rank] = what;
  active.progressed_at[rank] = now;
  // After a coordinator restart the attempt has no SCHEDULED deadline; progress gives it none.
  if (active.start_deadline.has_value()) active.start_deadline = now + StartTimeout();
}

void JobManager::NoteLogProgressLocked(const std::string& worker_id, const v1::LogLine& line) {
  JobRecord* record = ActiveRecordForLocked(worker_id, line.job_id(), line.attempt(), line.rank());
  if (record != nullptr) NoteProgressLocked(*record, line.rank(), line.text());
}

void JobManager::ExpireUnstartedAttemptsLocked() {
  const Clock::time_point now = now_();
  for (auto& [id, record] : jobs_) {
    if (!record.active.has_value() || !record.active->start_deadline.has_value()) continue;
    ActiveAttempt& active = *record.active;
    // The first step ends the SCHEDULED state; collective timeouts watch a running attempt.
    if (record.job.state() != v1::SCHEDULED) {
      active.start_deadline.reset();
      continue;
    }
    if (now < *active.start_deadline) continue;
    const auto waiting = std::find(active.accepted.begin(), active.accepted.end(), false);
    if (waiting != active.accepted.end()) {
      const size_t rank = static_cast<size_t>(waiting - active.accepted.begin());
      FailAttemptLocked(
          record, absl::StrCat("rank ", rank, " (worker ", active.worker_ids[rank],
                               ") did not accept its assignment within ", StartTimeout().count(),
                               " ms (the heartbeat timeout plus the rendezvous timeout)"));
      continue;
    }
    // Every rank accepted; the one silent longest is where the attempt hangs.
    size_t rank = 0;
    for (size_t other = 1; other < active.progressed_at.size(); ++other) {
      if (!active.finished[other] && active.progressed_at[other] < active.progressed_at[rank]) {
        rank = other;
      }
    }
    const std::string last = rank < active.progress.size() && !active.progress[rank].empty()
                                 ? active.progress[rank]
                                 : "none reported";
    FailAttemptLocked(
        record, absl::StrCat("rank ", rank, " (worker ", active.worker_ids[rank],
                             ") showed no progress for ", StartTimeout().count(),
                             " ms before the attempt's first step (the heartbeat timeout plus the "
                             "rendezvous timeout); its last step: ",
                             last));
  }
}

}  // namespace fsdpd::server
