// A job's state transitions and the end of an attempt: each transition stored with its time,
// reason and actor, and a failed attempt retried while attempts remain.
#include "absl/strings/str_cat.h"
#include "server/job_manager.h"
#include "spdlog/spdlog.h"

namespace fsdpd::server {

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

void JobManager::EndAttemptLocked(JobRecord& record, bool ok, const std::string& reason) {
  if (!record.active.has_value()) return;
  SnapshotLocked(record);
  const ActiveAttempt& active = *record.active;
  const std::string& job_id = record.job.id();
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
  const int attempt = record.job.attempt();
  const int max_restarts = record.job.spec().max_restarts();
  if (attempt <= max_restarts) {
    TransitionLocked(record, v1::RETRYING,
                     absl::StrCat(reason, " (attempt ", attempt, " of ", max_restarts + 1,
                                  " failed; retrying)"));
  } else {
    TransitionLocked(record, v1::FAILED, reason);
  }
}

}  // namespace fsdpd::server
