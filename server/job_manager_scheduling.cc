// Scheduling: waiting jobs are placed as gangs on idle workers (server/scheduler.h), and each
// placement starts an attempt whose assignments are stored, then sent to its workers.
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/job_manager.h"

namespace fsdpd::server {

void JobManager::ScheduleLocked() {
  if (shutting_down_) return;
  std::vector<SchedulableJob> waiting;
  for (const auto& [id, record] : jobs_) {
    const v1::JobState state = record.job.state();
    if (state != v1::PENDING && state != v1::RETRYING) continue;
    const v1::JobSpec& spec = record.job.spec();
    waiting.push_back({id, spec.priority(), record.submit_order, spec.parallel().device(),
                       spec.parallel().world_size()});
  }
  if (waiting.empty()) return;
  for (const Placement& placement : ScheduleGangs(waiting, workers_.IdleWorkers())) {
    StartAttemptLocked(jobs_.at(placement.job_id), placement.worker_ids);
  }
}

void JobManager::StartAttemptLocked(JobRecord& record, const std::vector<std::string>& worker_ids) {
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
  TransitionLocked(record, v1::SCHEDULED,
                   absl::StrCat("attempt ", attempt, " on ", absl::StrJoin(worker_ids, ", ")));
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
