// A job's state transitions and the record of its attempts: each transition stored with its
// time, reason and actor, each attempt's workers, hosts, end and outcome kept in Job.attempts, a
// failed attempt retried while attempts remain, a backfilled attempt preempted (no restart
// spent), and an attempt the OOM killer ended failed saying so.
#include "absl/strings/str_cat.h"
#include "server/job_manager.h"
#include "spdlog/spdlog.h"

namespace fsdpd::server {
namespace {

google::protobuf::Timestamp TimestampOf(int64_t unix_millis) {
  google::protobuf::Timestamp time;
  time.set_seconds(unix_millis / 1000);
  time.set_nanos(static_cast<int32_t>(unix_millis % 1000) * 1000000);
  return time;
}

}  // namespace

void JobManager::TransitionLocked(JobRecord& record, v1::JobState state, const std::string& reason,
                                  const std::string& actor) {
  SnapshotLocked(record);
  const int64_t now = UnixMillisNow();
  v1::Job& job = record.job;
  job.set_state(state);
  job.set_reason(reason);
  if (state == v1::RUNNING && job.started_unix_millis() == 0) job.set_started_unix_millis(now);
  if (IsTerminal(state)) job.set_finished_unix_millis(now);
  v1::StateChange change;
  change.set_job_id(job.id());
  change.set_state(state);
  change.set_reason(reason);
  change.set_attempt(job.attempt());
  change.set_unix_millis(now);
  change.set_actor(actor);
  *job.add_transitions() = change;
  LogStoreError(store_.RecordTransition(job, record.next_sequence++, change), "transition");
  PublishLocked(record);
  spdlog::info("{} → {} (attempt {}, by {}): {}", job.id(), v1::JobState_Name(state), job.attempt(),
               actor.empty() ? "anonymous" : actor, reason);
  v1::JobEvent event;
  *event.mutable_state() = change;
  NotifyLocked(record, [event](const auto& subscriber) { subscriber->OnEvent(event); });
  if (IsTerminal(state)) {
    NotifyLocked(record, [](const auto& subscriber) { subscriber->OnEnd(absl::OkStatus()); });
    record.subscribers.clear();
    if (observer_ != nullptr) observer_->OnJobFinished(job.id());
  }
}

void JobManager::RecordAttemptStartLocked(v1::Job& job,
                                          const std::vector<std::string>& worker_ids) {
  v1::Attempt* attempt = job.add_attempts();
  attempt->set_number(job.attempt());
  for (size_t rank = 0; rank < worker_ids.size(); ++rank) {
    v1::Attempt::Rank* entry = attempt->add_ranks();
    entry->set_rank(static_cast<int>(rank));
    entry->set_worker_id(worker_ids[rank]);
    if (std::optional<WorkerSnapshot> worker = workers_.Find(worker_ids[rank])) {
      entry->set_hostname(worker->info.hostname());
    }
  }
  *attempt->mutable_start_time() = TimestampOf(UnixMillisNow());
}

void JobManager::EndAttemptLocked(JobRecord& record, bool ok, const std::string& reason) {
  if (!record.active.has_value()) return;
  SnapshotLocked(record);
  const ActiveAttempt& active = *record.active;
  const std::string& job_id = record.job.id();
  for (v1::Attempt& attempt : *record.job.mutable_attempts()) {
    if (attempt.number() != active.attempt || attempt.has_end_time()) continue;
    *attempt.mutable_end_time() = TimestampOf(UnixMillisNow());
    attempt.set_outcome(ok && reason.empty() ? "succeeded" : reason);
    attempt.set_final_step(record.job.step());
  }
  for (size_t rank = 0; rank < active.worker_ids.size(); ++rank) {
    // Ranks that already reported are idle again; the others stay busy until they report
    // their cancellation or are lost.
    if (active.finished[rank]) continue;
    SendCancellation(active.worker_ids[rank], job_id, active.attempt, reason);
  }
  LogStoreError(store_.FinishAttempt(job_id, active.attempt, ok, reason, UnixMillisNow()),
                "finish attempt");
  rendezvous_.DropScope(job_id, active.attempt);
  record.active.reset();
}

void JobManager::FailAttemptLocked(JobRecord& record, const std::string& reason) {
  EndAttemptLocked(record, false, reason);
  // Attempts that ended in a preemption spent no restart.
  const int failed = record.job.attempt() - record.job.preemptions();
  const int max_restarts = record.job.spec().max_restarts();
  if (failed <= max_restarts) {
    TransitionLocked(
        record, v1::RETRYING,
        absl::StrCat(reason, " (attempt ", failed, " of ", max_restarts + 1, " failed; retrying)"));
  } else {
    TransitionLocked(record, v1::FAILED, reason);
  }
}

void JobManager::PreemptLocked(JobRecord& record, const std::string& for_job_id) {
  const std::string reason =
      absl::StrCat("preempted for ", for_job_id,
                   ", which is ahead in the queue and needs the workers this job was lent; it "
                   "resumes from its last checkpoint (no restart spent)");
  EndAttemptLocked(record, false, reason);
  record.job.set_preemptions(record.job.preemptions() + 1);
  record.job.set_backfilled(false);
  TransitionLocked(record, v1::PENDING, reason);
}

void JobManager::NoteOomKillLocked(const std::string& worker_id, const RankAssignment& previous,
                                   const v1::RegisterRequest& request) {
  if (!request.has_previous_oom_kill()) return;
  const v1::OomKill& oom = request.previous_oom_kill();
  JobRecord* record = FindLocked(oom.job_id());
  // Only the rank this worker was given counts: the registry's assignment before this
  // registration, or, once the worker was already declared lost, the stored attempt.
  bool assigned = previous.active() && previous.job_id == oom.job_id() &&
                  previous.attempt == oom.attempt() && previous.rank == oom.rank();
  if (!assigned && record != nullptr && oom.attempt() >= 1 &&
      oom.attempt() <= record->job.attempt()) {
    absl::StatusOr<std::vector<AssignmentRecord>> stored =
        store_.LoadAssignments(oom.job_id(), oom.attempt());
    if (stored.ok()) {
      for (const AssignmentRecord& assignment : *stored) {
        assigned = assigned || (assignment.rank == oom.rank() && assignment.worker_id == worker_id);
      }
    }
  }
  if (record == nullptr || !assigned ||
      (!oom.job_uid().empty() && oom.job_uid() != record->job.uid())) {
    spdlog::warn(
        "worker {} reports an OOM kill during {} attempt {} rank {}, which it was not "
        "assigned; ignored",
        worker_id, oom.job_id(), oom.attempt(), oom.rank());
    return;
  }
  const int64_t needed = RankMemoryBytes(record->job.spec());
  // Below what the job needs by a margin, so that neither it nor a slightly smaller job is sent
  // into the same wall.
  const int64_t lowered = needed - needed / 10;
  const std::string what =
      absl::StrCat(oom.job_id(), " attempt ", oom.attempt(), " rank ", oom.rank(),
                   " was killed by the kernel's OOM killer (cgroup ",
                   oom.cgroup().empty() ? "unknown" : oom.cgroup(), ": oom_kill ",
                   oom.oom_kills_before(), " → ", oom.oom_kills_after(), ")");
  workers_.LowerMemory(worker_id, lowered,
                       absl::StrCat("lowered to ", lowered >> 20, " MiB: ", what, " needing about ",
                                    needed >> 20, " MiB a rank"));
  const std::optional<WorkerSnapshot> worker = workers_.Find(worker_id);
  const int64_t admitted = worker.has_value() ? worker->info.memory_bytes() : lowered;
  spdlog::warn("worker {}: {}; its admitted memory is now {} MiB", worker_id, what, admitted >> 20);
  if (ActiveRecordForLocked(worker_id, oom.job_id(), oom.attempt(), oom.rank(), oom.job_uid()) ==
      nullptr) {
    return;  // the attempt already ended (the worker was lost first)
  }
  const std::string reason =
      absl::StrCat("rank ", oom.rank(), " (worker ", worker_id,
                   ") was killed by the kernel's OOM killer: ", "the job needs about ",
                   needed >> 20, " MiB a rank, more than the worker could use; its ",
                   "admitted memory is now ", admitted >> 20, " MiB");
  FailAttemptLocked(*record, reason);
}

}  // namespace fsdpd::server
