// Scheduling: waiting jobs are placed as gangs on idle workers (server/scheduler.h), held jobs
// say why, backfilled jobs are preempted for the head job, and each placement starts an attempt
// whose assignments are stored, then sent to its workers.
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/job_manager.h"

namespace fsdpd::server {

int64_t JobManager::RankMemoryBytes(const v1::JobSpec& spec) {
  return static_cast<int64_t>(EstimateRankDeviceBytes(spec));
}

std::vector<FleetWorker> JobManager::FleetLocked() const {
  std::vector<FleetWorker> fleet = workers_.Fleet();
  for (FleetWorker& worker : fleet) {
    // Consolidating a checkpoint (job_manager_exports.cc): counts for the fleet, takes no rank.
    if (worker.state == FleetWorker::State::kIdle && ExportingLocked(worker.id)) {
      worker.state = FleetWorker::State::kAway;
    }
    if (worker.state != FleetWorker::State::kRunning) continue;
    // Busy with a rank its job no longer runs (the attempt ended): free once it reports.
    const JobRecord* record = FindLocked(worker.job_id);
    bool runs = false;
    if (record != nullptr && record->active.has_value()) {
      const ActiveAttempt& active = *record->active;
      for (size_t rank = 0; rank < active.worker_ids.size(); ++rank) {
        runs = runs || (active.worker_ids[rank] == worker.id && !active.finished[rank]);
      }
    }
    if (!runs) worker.state = FleetWorker::State::kDraining;
  }
  return fleet;
}

void JobManager::ScheduleLocked() {
  if (shutting_down_) return;
  std::vector<SchedulableJob> waiting;
  std::vector<RunningJob> running;
  for (const auto& [id, record] : jobs_) {
    const v1::JobState state = record.job.state();
    const v1::JobSpec& spec = record.job.spec();
    if (state == v1::PENDING || state == v1::RETRYING) {
      waiting.push_back({id, spec.priority(), record.submit_order, spec.parallel().device(),
                         spec.parallel().world_size(), RankMemoryBytes(spec)});
    } else if (record.active.has_value()) {
      running.push_back({id, spec.priority(), record.submit_order, spec.parallel().device(),
                         record.start_order, record.job.backfilled()});
    }
  }
  if (waiting.empty()) return;
  const Schedule schedule = ScheduleGangs(waiting, FleetLocked(), running);
  for (const Preemption& preemption : schedule.preemptions) {
    PreemptLocked(jobs_.at(preemption.job_id), preemption.for_job_id);
  }
  std::set<std::string> decided;
  for (const Placement& placement : schedule.placements) decided.insert(placement.job_id);
  // Held jobs say why, once the workers of a restarted coordinator had their heartbeat timeout
  // to register again (until then a small fleet is only the fleet coming back). A reason that
  // only follows a growing fleet is stored at most once a heartbeat timeout, so a fleet that
  // registers worker by worker does not write a state change per worker per held job.
  const Clock::time_point now = now_();
  const auto interval = workers_.config().heartbeat_timeout;
  const bool settled = now - started_at_ >= interval;
  for (const Hold& hold : schedule.holds) {
    decided.insert(hold.job_id);
    JobRecord& record = jobs_.at(hold.job_id);
    if (!settled || record.job.reason() == hold.reason) continue;
    const bool was_held = absl::StartsWith(record.job.reason(), kHeldPrefix);
    if (was_held && record.held_noted_at.has_value() && now - *record.held_noted_at < interval) {
      continue;
    }
    record.held_noted_at = now;
    TransitionLocked(record, record.job.state(), hold.reason);
  }
  for (const SchedulableJob& job : waiting) {
    JobRecord& record = jobs_.at(job.id);
    if (decided.count(job.id) == 0 && absl::StartsWith(record.job.reason(), kHeldPrefix)) {
      TransitionLocked(record, record.job.state(), "the fleet can run it now; waiting for workers");
    }
  }
  for (const Placement& placement : schedule.placements) {
    StartAttemptLocked(jobs_.at(placement.job_id), placement.worker_ids,
                       placement.backfilled ? placement.ahead_of : "");
  }
}

void JobManager::StartAttemptLocked(JobRecord& record, const std::vector<std::string>& worker_ids,
                                    const std::string& ahead_of) {
  SnapshotLocked(record);
  v1::Job& job = record.job;
  const int attempt = job.attempt() + 1;
  const int world_size = static_cast<int>(worker_ids.size());
  std::vector<AssignmentRecord> assignments;
  for (int rank = 0; rank < world_size; ++rank) {
    assignments.push_back({job.id(), attempt, rank, worker_ids[rank]});
  }
  if (absl::Status status = store_.InsertAttempt(job.id(), attempt, assignments, UnixMillisNow());
      !status.ok()) {
    // Without a stored assignment a restart could not reconcile the attempt: do not start it.
    LogStoreError(status, "insert attempt");
    return;
  }
  job.set_attempt(attempt);
  job.set_backfilled(!ahead_of.empty());
  record.start_order = next_start_order_++;
  job.clear_worker_ids();
  for (const std::string& worker_id : worker_ids) job.add_worker_ids(worker_id);
  ActiveAttempt active;
  active.attempt = attempt;
  active.worker_ids = worker_ids;
  active.finished.assign(world_size, false);
  active.reattached.assign(world_size, true);
  active.last_reported_step.assign(world_size, 0);
  active.last_log_sequence.assign(world_size, 0);
  active.accepted.assign(world_size, false);
  active.start_deadline = now_() + StartTimeout();
  record.active = std::move(active);
  rendezvous_.OpenScope(job.id(), attempt);
  std::string reason = absl::StrCat("attempt ", attempt, " on ", absl::StrJoin(worker_ids, ", "));
  if (!ahead_of.empty()) {
    absl::StrAppend(&reason, " (backfilled: idle workers lent while ", ahead_of,
                    " waits; they go back to it if it needs them)");
  }
  TransitionLocked(record, v1::SCHEDULED, reason);
  for (int rank = 0; rank < world_size; ++rank) {
    workers_.Assign(worker_ids[rank], {job.id(), attempt, rank});
    v1::CoordinatorMessage message;
    v1::Assignment* assignment = message.mutable_assignment();
    assignment->set_job_id(job.id());
    assignment->set_job_uid(job.uid());
    assignment->set_attempt(attempt);
    assignment->set_rank(rank);
    assignment->set_world_size(world_size);
    *assignment->mutable_spec() = job.spec();
    assignment->set_rendezvous_scope(RendezvousStore::ScopeName(job.id(), attempt));
    // Sent once the attempt is stored; a worker without an open session fails the attempt by
    // the SCHEDULED deadline unless it accepts after reconnecting.
    SendLocked(worker_ids[rank], message);
  }
}

}  // namespace fsdpd::server
