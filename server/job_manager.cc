// The job manager's life: construction, loading the stored jobs at start (attempts that were
// running wait for their workers to come back), shutdown; and the lookups every part uses.
#include "server/job_manager.h"

#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "spdlog/spdlog.h"

namespace fsdpd::server {

int64_t JobManager::UnixMillisNow() { return absl::ToUnixMillis(absl::Now()); }

int64_t JobManager::SubmitOrderOf(const std::string& job_id) {
  int64_t order = 0;
  const size_t dash = job_id.rfind('-');
  if (dash != std::string::npos) (void)absl::SimpleAtoi(job_id.substr(dash + 1), &order);
  return order;
}

bool IsTerminal(v1::JobState state) {
  return state == v1::SUCCEEDED || state == v1::FAILED || state == v1::CANCELLED;
}

JobManager::JobManager(JobManagerConfig config, JobStore& store, WorkerRegistry& workers,
                       RendezvousStore& rendezvous, std::function<Clock::time_point()> now)
    : config_(std::move(config)),
      store_(store),
      workers_(workers),
      rendezvous_(rendezvous),
      artifacts_(config_.artifact_dir),
      profiles_(config_.artifact_dir),
      now_(std::move(now)),
      pacer_(ReportPacer::RulesFor(workers.config().heartbeat_interval,
                                   workers.config().heartbeat_timeout)) {}

void JobManager::SetObserver(JobObserver* observer) {
  std::lock_guard<std::mutex> lock(mutex_);
  observer_ = observer;
}

absl::Status JobManager::Load() {
  absl::StatusOr<std::vector<v1::Job>> jobs = store_.LoadJobs();
  if (!jobs.ok()) return jobs.status();
  std::lock_guard<std::mutex> lock(mutex_);
  const Clock::time_point deadline = now_() + workers_.config().heartbeat_timeout;
  std::vector<std::string> broken;
  for (v1::Job& job : *jobs) {
    JobRecord record;
    record.submit_order = SubmitOrderOf(job.id());
    record.job = std::move(job);
    // Jobs stored before unique ids kept their checkpoints under the display id.
    if (record.job.uid().empty()) record.job.set_uid(record.job.id());
    const std::string id = record.job.id();
    if (!IsTerminal(record.job.state())) {
      // Only the last sequence is needed: every transition and the newest step.
      absl::StatusOr<std::vector<StoredEvent>> events = store_.LoadEvents(id, /*max_steps=*/1);
      if (!events.ok()) return events.status();
      if (!events->empty()) record.next_sequence = events->back().sequence + 1;
      // A damaged log table must not keep the coordinator from starting (the job's state and
      // history are elsewhere): its lines then count from zero.
      absl::StatusOr<int64_t> log_bytes = store_.LogBytes(id);
      if (log_bytes.ok()) {
        record.log_bytes = *log_bytes;
      } else {
        spdlog::error("{}: cannot count its stored log lines: {}", id,
                      log_bytes.status().ToString());
      }
    }
    const v1::JobState state = record.job.state();
    if (state == v1::SCHEDULED || state == v1::RUNNING) {
      absl::StatusOr<std::vector<AssignmentRecord>> assignments =
          store_.LoadAssignments(id, record.job.attempt());
      if (!assignments.ok()) return assignments.status();
      ActiveAttempt active;
      active.attempt = record.job.attempt();
      for (const AssignmentRecord& assignment : *assignments) {
        active.worker_ids.push_back(assignment.worker_id);
      }
      const size_t ranks = active.worker_ids.size();
      active.finished.assign(ranks, false);
      active.reattached.assign(ranks, false);
      active.last_reported_step.assign(ranks, 0);
      active.last_log_sequence.assign(ranks, 0);
      active.accepted.assign(ranks, true);  // the recovery deadline governs from here
      active.recovery_deadline = deadline;
      active.last_aggregated_step = record.job.step();
      if (ranks == 0) broken.push_back(id);
      rendezvous_.OpenScope(id, active.attempt);
      record.active = std::move(active);
    }
    PublishLocked(jobs_.emplace(id, std::move(record)).first->second);
  }
  for (const std::string& id : broken) {
    FailAttemptLocked(jobs_.at(id), "the stored attempt has no assignments");
  }
  spdlog::info("job store: loaded {} jobs", jobs_.size());
  return absl::OkStatus();
}

JobManager::JobRecord* JobManager::FindLocked(const std::string& job_id) {
  auto found = jobs_.find(job_id);
  return found == jobs_.end() ? nullptr : &found->second;
}

const JobManager::JobRecord* JobManager::FindLocked(const std::string& job_id) const {
  auto found = jobs_.find(job_id);
  return found == jobs_.end() ? nullptr : &found->second;
}

void JobManager::Shutdown() {
  std::lock_guard<std::mutex> lock(mutex_);
  shutting_down_ = true;
  for (auto& [id, record] : jobs_) {
    for (const auto& subscriber : record.subscribers) {
      subscriber->OnEnd(absl::UnavailableError("coordinator shutting down"));
    }
    record.subscribers.clear();
  }
  // Workers keep training and reconnect to the next coordinator: no job is cancelled.
  workers_.CloseAllSessions(absl::UnavailableError("coordinator shutting down"));
  LogStoreError(store_.Flush(), "flush on shutdown");
}

}  // namespace fsdpd::server
