// What the job manager sends out: messages to workers and events to a job's subscribers, each
// held while a run's store writes are not yet committed and sent once they are. A run of changes
// is grouped into one store transaction (RunGroupedLocked); if any write of the run fails (a full
// disk, a read-only volume), the transaction is rolled back and so is the run in memory (records,
// their workers' assignments, the rendezvous scope), and what it held is dropped.
#include <algorithm>

#include "server/job_manager.h"

namespace fsdpd::server {

void JobManager::SnapshotLocked(const JobRecord& record) {
  if (!deferring_publish_ || snapshots_.count(&record) != 0) return;
  snapshots_[&record] = {record.job, record.next_sequence, record.active};
}

void JobManager::NoteStepUndoLocked(JobRecord& record, const v1::StepReport& report) {
  if (!deferring_publish_ || snapshots_.count(&record) != 0 || !record.active.has_value()) return;
  const ActiveAttempt& active = *record.active;
  const int rank = report.rank();
  StepUndo undo;
  undo.record = &record;
  undo.attempt = active.attempt;
  undo.rank = rank;
  undo.reattached = active.reattached[rank];
  undo.accepted = active.accepted[rank];
  undo.last_reported_step = active.last_reported_step[rank];
  undo.step = report.step();
  if (auto found = active.steps.find(report.step()); found != active.steps.end()) {
    undo.accumulator = found->second;
  }
  step_undos_.push_back(std::move(undo));
}

void JobManager::RollBackRunLocked() {
  for (auto& [pointer, snapshot] : snapshots_) {
    JobRecord& record = *const_cast<JobRecord*>(pointer);
    const std::string& job_id = record.job.id();
    const std::optional<ActiveAttempt>& now = record.active;
    const std::optional<ActiveAttempt>& before = snapshot.active;
    const bool same = now.has_value() && before.has_value() && now->attempt == before->attempt;
    if (now.has_value() && !same) {
      // An attempt this run started: its workers are free again.
      for (const std::string& worker_id : now->worker_ids) {
        workers_.Release(worker_id, job_id, now->attempt);
      }
      rendezvous_.DropScope(job_id, now->attempt);
    }
    if (before.has_value() && !same) {
      // An attempt this run ended: its ranks that had not finished are assigned again.
      rendezvous_.OpenScope(job_id, before->attempt);
      for (size_t rank = 0; rank < before->worker_ids.size(); ++rank) {
        if (before->finished[rank]) continue;
        workers_.Assign(before->worker_ids[rank],
                        {job_id, before->attempt, static_cast<int>(rank)});
      }
    }
    record.job = std::move(snapshot.job);
    record.next_sequence = snapshot.next_sequence;
    record.active = std::move(snapshot.active);
  }
  snapshots_.clear();
  // Entries noted before a snapshot of the same record was taken undo what the snapshot kept.
  for (auto undo = step_undos_.rbegin(); undo != step_undos_.rend(); ++undo) {
    std::optional<ActiveAttempt>& active = undo->record->active;
    if (!active.has_value() || active->attempt != undo->attempt) continue;
    active->reattached[undo->rank] = undo->reattached;
    active->accepted[undo->rank] = undo->accepted;
    active->last_reported_step[undo->rank] = undo->last_reported_step;
    if (undo->accumulator.has_value()) {
      active->steps[undo->step] = *undo->accumulator;
    } else {
      active->steps.erase(undo->step);
    }
  }
  step_undos_.clear();
}

bool JobManager::RunGroupedLocked(const std::function<void()>& body) {
  store_.BeginGroup();
  deferring_publish_ = true;
  run_failed_ = false;
  body();
  if (run_failed_) {
    store_.AbortGroup();
  } else {
    LogStoreError(store_.EndGroup(), "commit");
  }
  deferring_publish_ = false;
  if (run_failed_) {
    RollBackRunLocked();
    unpublished_.clear();
    held_notifications_.clear();
    held_sends_.clear();
    return false;
  }
  snapshots_.clear();
  step_undos_.clear();
  std::map<const JobRecord*, bool> unpublished = std::move(unpublished_);
  unpublished_.clear();
  for (const auto& [record, whole] : unpublished) PublishLocked(*record, !whole);
  std::vector<std::pair<std::string, v1::CoordinatorMessage>> sends = std::move(held_sends_);
  held_sends_.clear();
  for (const auto& [worker_id, message] : sends) workers_.Send(worker_id, message);
  SendHeldNotificationsLocked();
  return true;
}

void JobManager::SendLocked(const std::string& worker_id, const v1::CoordinatorMessage& message) {
  if (deferring_publish_) {
    held_sends_.emplace_back(worker_id, message);
  } else {
    workers_.Send(worker_id, message);
  }
}

void JobManager::SendCancellation(const std::string& worker_id, const std::string& job_id,
                                  int attempt, const std::string& reason) {
  v1::CoordinatorMessage message;
  v1::Cancellation* cancellation = message.mutable_cancellation();
  cancellation->set_job_id(job_id);
  cancellation->set_attempt(attempt);
  cancellation->set_reason(reason);
  SendLocked(worker_id, message);
}

void JobManager::NotifyLocked(const JobRecord& record,
                              std::function<void(const std::shared_ptr<JobSubscriber>&)> notify) {
  if (record.subscribers.empty()) return;
  auto send = [subscribers = record.subscribers, notify = std::move(notify)] {
    for (const auto& subscriber : subscribers) notify(subscriber);
  };
  if (deferring_publish_) {
    held_notifications_.push_back(std::move(send));
  } else {
    send();
  }
}

void JobManager::SendHeldNotificationsLocked() {
  std::vector<std::function<void()>> held = std::move(held_notifications_);
  held_notifications_.clear();
  for (const auto& send : held) send();
}

}  // namespace fsdpd::server
