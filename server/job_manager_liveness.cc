// Lost workers, and why overload must not look like death. A worker is lost only on evidence:
// no message from it (any message counts) for the heartbeat timeout, counted from when the
// coordinator could have read one. Two things suspend the decision (docs/operations.md
// "Overload"):
//  - the coordinator's own processing lag (processing_lag.h) above its bound, a quarter of the
//    heartbeat timeout: silence it caused is no evidence, and once it catches up every
//    worker's silence counts from then;
//  - a mass silence (WorkerRegistry::ExpiryRules): more than a fraction of the fleet, at least
//    two workers with open sessions, went quiet within one heartbeat period. As Kubernetes'
//    node lifecycle controller stops evicting when a whole zone goes NotReady at once, the
//    coordinator then fails nothing on silence alone, and waits: the workers speak again, or
//    their streams end (evidence), or the ranks that still run fail by their collective
//    timeout and report it. When the hold ends, every worker's silence counts from then, as
//    after a lag: workers come back one by one after a partition.
// Each change of the decision is logged, and shown by GetLivenessHealth (the metrics exporter
// and the coordinator's health read it). So is the pacing of step reports (report_pacer.h),
// which the same lag drives: the backpressure that keeps a lag from growing.
#include "absl/strings/str_cat.h"
#include "server/job_manager.h"
#include "spdlog/spdlog.h"

namespace fsdpd::server {

void JobManager::PaceReportsLocked(std::chrono::milliseconds lag) {
  const std::string change = pacer_.Update(lag, now_());
  if (!change.empty()) {
    if (pacer_.interval().count() > 0) {
      spdlog::warn("{}", change);
    } else {
      spdlog::info("{}", change);
    }
  }
  std::lock_guard<std::mutex> lock(liveness_mutex_);
  liveness_.paced_interval_millis = pacer_.interval().count();
  liveness_.pacings = pacer_.engagements();
}

void JobManager::ExpireSilentWorkersLocked(std::chrono::milliseconds lag) {
  const std::chrono::milliseconds bound = workers_.config().MaxProcessingLag();
  const Clock::time_point now = now_();
  if (lag > bound) {
    heard_floor_ = now;
    SetLivenessLocked(true,
                      absl::StrCat("the coordinator lags ", lag.count(),
                                   " ms behind its workers' messages (bound ", bound.count(),
                                   " ms, a quarter of the heartbeat timeout)"),
                      lag.count(), 0);
    return;
  }
  WorkerRegistry::ExpiryRules rules;
  rules.heard_floor = heard_floor_;
  rules.mass_silence_fraction = workers_.config().mass_silence_fraction;
  rules.holding = mass_silence_holding_;
  WorkerRegistry::Expiry expiry = workers_.ExpireSilent(now, rules);
  mass_silence_holding_ = expiry.held > 0;
  // Those still silent when a mass silence ends get a full timeout from now.
  if (expiry.hold_ended) heard_floor_ = now;
  if (expiry.held > 0) {
    SetLivenessLocked(
        true,
        absl::StrCat(expiry.silent, " of ", expiry.fleet,
                     " workers went silent within one heartbeat period (more than ",
                     workers_.config().mass_silence_fraction * 100,
                     "% of the fleet): none with an open session is declared lost while it lasts"),
        lag.count(), expiry.held);
  } else {
    SetLivenessLocked(false, "", lag.count(), 0);
  }
  for (const WorkerSnapshot& lost : expiry.lost) {
    spdlog::warn("worker {} on {} lost: no message for {} ms", lost.info.id(), lost.info.hostname(),
                 workers_.config().heartbeat_timeout.count());
    // Its unconfirmed reports are resent if it comes back (and registers again); until then
    // nothing would confirm them.
    unconfirmed_reports_.erase(lost.info.id());
    told_pacing_.erase(lost.info.id());
    const RankAssignment& assignment = lost.assignment;
    if (!assignment.active()) continue;
    // If the silence was a partition, the worker still runs the rank: told to stop on its open
    // stream, it reads this when it is heard again (a new session gets it at registration,
    // from its claim). Until it reports the rank ended it takes no other work.
    v1::CoordinatorMessage stop;
    stop.mutable_cancellation()->set_job_id(assignment.job_id);
    stop.mutable_cancellation()->set_attempt(assignment.attempt);
    stop.mutable_cancellation()->set_reason(
        absl::StrCat("worker ", lost.info.id(), " was lost: no message for ",
                     workers_.config().heartbeat_timeout.count(), " ms"));
    workers_.Send(lost.info.id(), stop);
    JobRecord* record = ActiveRecordForLocked(lost.info.id(), assignment.job_id, assignment.attempt,
                                              assignment.rank);
    if (record != nullptr)
      FailAttemptLocked(*record, absl::StrCat("worker ", lost.info.id(), " lost"));
  }
}

void JobManager::SetLivenessLocked(bool suspended, const std::string& reason, int64_t lag_millis,
                                   int held_workers) {
  std::lock_guard<std::mutex> lock(liveness_mutex_);
  const bool was = liveness_.suspended;
  // Logged when the decision or its cause (lag, mass silence) changes; not for every tick's
  // new figures.
  const bool cause_changed = (held_workers == 0) != (liveness_.held_workers == 0);
  if (suspended && !was) ++liveness_.suspensions;
  if (suspended && (!was || cause_changed)) {
    spdlog::warn("lost-worker decisions suspended: {}", reason);
  } else if (!suspended && was) {
    spdlog::info(
        "lost-worker decisions resume: a worker is lost after {} ms without a message, counted "
        "from when the coordinator caught up",
        workers_.config().heartbeat_timeout.count());
  }
  liveness_.suspended = suspended;
  liveness_.reason = reason;
  liveness_.lag_millis = lag_millis;
  liveness_.held_workers = held_workers;
}

JobManager::LivenessHealth JobManager::GetLivenessHealth() const {
  std::lock_guard<std::mutex> lock(liveness_mutex_);
  return liveness_;
}

void JobManager::NoteReadPaused(const std::string& worker_id, bool paused) {
  workers_.SetReadPaused(worker_id, paused, now_());
}

}  // namespace fsdpd::server
