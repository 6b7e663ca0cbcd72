// Scheduling: waiting jobs are placed as gangs on idle workers (server/scheduler.h), every job
// that waits says why (the scheduler's WaitReason), backfilled jobs are preempted for the head
// job, and each placement starts an attempt whose assignments are stored, then sent to its
// workers; each attempt is recorded in Job.attempts with its workers and their hosts.
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/job_manager.h"

namespace fsdpd::server {

int64_t JobManager::RankMemoryBytes(const v1::JobSpec& spec) {
  return static_cast<int64_t>(EstimateRankDeviceBytes(spec));
}

const std::vector<FleetWorker>& JobManager::FleetLocked() {
  // The registry's fleet is shared until a worker changes. Only then is this copy of it made
  // again, and the reasons of workers away asked for; otherwise each pass puts back the states
  // the last one changed.
  std::shared_ptr<const std::vector<FleetWorker>> base = workers_.Fleet();
  const bool fresh = base != fleet_base_;
  if (fresh) {
    fleet_view_ = *base;
    fleet_base_ = std::move(base);
  }
  // Whether the worker runs an unfinished rank of its job's current attempt: one look at the
  // rank it was assigned, which is the one it runs; a scan of the job's ranks only when that
  // look fails (a worker still busy with an ended attempt). A set of every running (job,
  // worker) pair, built each pass, was a third of the pass on 10,000 workers.
  const auto runs_unfinished_rank = [this](const FleetWorker& worker) {
    const JobRecord* record = FindLocked(worker.job_id);
    if (record == nullptr || !record->active.has_value()) return false;
    const ActiveAttempt& active = *record->active;
    const auto unfinished = [&](size_t rank) {
      return active.worker_ids[rank] == worker.id && !active.finished[rank];
    };
    if (worker.rank >= 0 && static_cast<size_t>(worker.rank) < active.worker_ids.size() &&
        unfinished(static_cast<size_t>(worker.rank))) {
      return true;
    }
    for (size_t rank = 0; rank < active.worker_ids.size(); ++rank) {
      if (unfinished(rank)) return true;
    }
    return false;
  };
  for (size_t i = 0; i < fleet_view_.size(); ++i) {
    FleetWorker& worker = fleet_view_[i];
    if (!fresh) {
      worker.state = (*fleet_base_)[i].state;
      if (worker.state != FleetWorker::State::kAway) worker.away_reason.clear();
    }
    // Consolidating a checkpoint (job_manager_exports.cc): counts for the fleet, takes no rank.
    if (worker.state == FleetWorker::State::kIdle && ExportingLocked(worker.id)) {
      worker.state = FleetWorker::State::kAway;
      worker.away_reason = "is consolidating a checkpoint for an export";
    } else if (worker.state == FleetWorker::State::kAway && fresh) {
      const std::optional<WorkerSnapshot> found = workers_.Find(worker.id);
      if (!found.has_value()) continue;
      const v1::WorkerHealth& health = found->info.health();
      if (!health.unhealthy().empty()) {
        worker.away_reason = absl::StrCat("reports itself unhealthy: ", health.unhealthy());
      } else if (!health.checkpoint_root_error().empty()) {
        worker.away_reason =
            absl::StrCat("cannot write its checkpoint root, where every job writes (",
                         health.checkpoint_root_error(), ")");
      } else if (!found->connected) {
        worker.away_reason = "has no session (reconnecting)";
      } else {
        worker.away_reason = "still runs work it was not assigned";
      }
    }
    if (worker.state != FleetWorker::State::kRunning) continue;
    // Busy with a rank its job no longer runs (the attempt ended): free once it reports.
    if (!runs_unfinished_rank(worker)) worker.state = FleetWorker::State::kDraining;
  }
  return fleet_view_;
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
                         spec.parallel().world_size(), RankMemoryBytes(spec),
                         MinComputeCapability(spec)});
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
  // Held jobs (the fleet could not run them) store that as a transition once the workers of a
  // restarted coordinator had their heartbeat timeout to register again (until then a small
  // fleet is only the fleet coming back), and a reason that only follows a growing fleet at most
  // once a heartbeat timeout, so a fleet that registers worker by worker does not write a state
  // change per worker per held job. Until then, and for every other job that waits, the reason
  // is only published: it is recomputed on every pass.
  const Clock::time_point now = now_();
  const auto interval = workers_.config().heartbeat_timeout;
  const bool settled = now - started_at_ >= interval;
  for (const Hold& hold : schedule.holds) {
    JobRecord& record = jobs_.at(hold.job_id);
    const std::string last = LastTransitionReason(record.job);
    const bool was_held = absl::StartsWith(last, kHeldPrefix);
    const bool throttled =
        was_held && record.held_noted_at.has_value() && now - *record.held_noted_at < interval;
    if (last == hold.reason || !settled || throttled) {
      SetWaitReasonLocked(record, WaitingReason(record.job, hold.reason));
      continue;
    }
    record.held_noted_at = now;
    TransitionLocked(record, record.job.state(), hold.reason);
  }
  for (const Hold& wait : schedule.waits) {
    JobRecord& record = jobs_.at(wait.job_id);
    if (absl::StartsWith(LastTransitionReason(record.job), kHeldPrefix)) {
      TransitionLocked(record, record.job.state(), kFleetCanRunReason);
    }
    SetWaitReasonLocked(record, WaitingReason(record.job, wait.reason));
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
  RecordAttemptStartLocked(job, worker_ids);
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
  // A large gang's workers are listed in Job.attempts (fsdpctl describe); the reason names the
  // first few. Listing 1,000 made each state change 22 KB, copied with the record on every run
  // of reports (bench/RESULTS.md, "At cluster scale").
  constexpr size_t kNamedWorkers = 4;
  std::string reason;
  if (worker_ids.size() <= kNamedWorkers) {
    reason = absl::StrCat("attempt ", attempt, " on ", absl::StrJoin(worker_ids, ", "));
  } else {
    reason = absl::StrCat(
        "attempt ", attempt, " on ", worker_ids.size(),
        " workers: ", absl::StrJoin(worker_ids.begin(), worker_ids.begin() + kNamedWorkers, ", "),
        " and ", worker_ids.size() - kNamedWorkers, " more (fsdpctl describe lists them)");
  }
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

std::string JobManager::LastTransitionReason(const v1::Job& job) {
  return job.transitions_size() > 0 ? job.transitions(job.transitions_size() - 1).reason() : "";
}

std::string JobManager::WaitingReason(const v1::Job& job, const std::string& why) {
  const std::string last = LastTransitionReason(job);
  if (last.empty() || last == kSubmittedReason || last == kFleetCanRunReason ||
      absl::StartsWith(last, kHeldPrefix)) {
    return why;
  }
  return absl::StrCat(last, "; ", why);
}

void JobManager::SetWaitReasonLocked(JobRecord& record, const std::string& reason) {
  if (record.job.reason() == reason) return;
  record.job.set_reason(reason);
  PublishLocked(record);
}

}  // namespace fsdpd::server
