#include "server/job_manager.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "server/cluster_identity.h"
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
      now_(std::move(now)) {}

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

std::vector<FieldError> JobManager::CheckSpec(const v1::JobSpec& spec) const {
  std::vector<FieldError> errors = ValidateJobSpec(spec);
  if (!errors.empty()) return errors;
  if (spec.parallel().world_size() > config_.max_world_size) {
    errors.push_back(
        {"parallel.world_size", absl::StrCat("must be at most ", config_.max_world_size,
                                             " (the coordinator's --max-world-size), got ",
                                             spec.parallel().world_size())});
  }
  const int64_t largest = workers_.LargestMemory(spec.parallel().device());
  const double needed = EstimateRankDeviceBytes(spec);
  if (largest > 0 && needed > static_cast<double>(largest)) {
    errors.push_back(
        {"parallel.device",
         absl::StrCat("one rank needs about ", static_cast<int64_t>(needed / (1 << 20)),
                      " MiB of device memory but the largest registered ", spec.parallel().device(),
                      " worker has ", largest / (1 << 20),
                      " MiB; raise parallel.world_size or shrink the model or batch")});
  }
  return errors;
}

absl::StatusOr<std::string> JobManager::Submit(const v1::JobSpec& spec, const std::string& owner) {
  if (std::vector<FieldError> errors = CheckSpec(spec); !errors.empty()) {
    return absl::InvalidArgumentError(FormatFieldErrors(errors));
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (shutting_down_) return absl::UnavailableError("coordinator shutting down");
  if (!store_writable_.load()) return StoreUnavailable();
  // The id, the row and the first transition in one commit; readers see the job once it is
  // committed.
  store_.BeginGroup();
  deferring_publish_ = true;
  absl::StatusOr<std::string> id = store_.NextJobId();
  absl::Status status = id.status();
  JobRecord* stored = nullptr;
  if (status.ok()) {
    JobRecord record;
    record.submit_order = SubmitOrderOf(*id);
    record.job.set_id(*id);
    record.job.set_uid(NewUuid());  // unique across clusters and restarts
    *record.job.mutable_spec() = spec;
    record.job.set_state(v1::PENDING);
    record.job.set_created_unix_millis(UnixMillisNow());
    record.job.set_reason("submitted");
    record.job.set_owner(owner);
    status = store_.InsertJob(record.job);
    if (status.ok()) {
      stored = &jobs_.emplace(*id, std::move(record)).first->second;
      TransitionLocked(*stored, v1::PENDING, "submitted", owner);
    }
  }
  if (absl::Status commit = store_.EndGroup(); status.ok()) status = commit;
  deferring_publish_ = false;
  unpublished_.clear();
  held_notifications_.clear();  // a new job has no subscribers yet
  snapshots_.clear();
  held_sends_.clear();
  if (!status.ok()) {
    if (stored != nullptr) jobs_.erase(*id);  // not stored: the job was never accepted
    LogStoreError(status, "submit");
    return StoreUnavailable();
  }
  PublishLocked(*stored);
  spdlog::info("{} submitted by {}: {} on {} {} worker(s), uid {}", *id,
               owner.empty() ? "anonymous" : owner, spec.name(), spec.parallel().world_size(),
               spec.parallel().device(), stored->job.uid());
  RunGroupedLocked([this] { ScheduleLocked(); });
  return *id;
}

JobManager::JobRecord* JobManager::FindLocked(const std::string& job_id) {
  auto found = jobs_.find(job_id);
  return found == jobs_.end() ? nullptr : &found->second;
}

const JobManager::JobRecord* JobManager::FindLocked(const std::string& job_id) const {
  auto found = jobs_.find(job_id);
  return found == jobs_.end() ? nullptr : &found->second;
}

absl::StatusOr<v1::Job> JobManager::Cancel(const std::string& job_id, const std::string& reason,
                                           const std::string& actor) {
  std::lock_guard<std::mutex> lock(mutex_);
  JobRecord* record = FindLocked(job_id);
  if (record == nullptr)
    return absl::NotFoundError(absl::StrCat("no job with id \"", job_id, "\""));
  const v1::JobState state = record->job.state();
  if (state == v1::CANCELLED) return record->job;
  if (IsTerminal(state)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job_id, " already ended as ", v1::JobState_Name(state), "; nothing to cancel"));
  }
  if (!store_writable_.load()) return StoreUnavailable();
  const std::string why = reason.empty() ? "cancelled by user" : reason;
  const bool stored = RunGroupedLocked([&] {
    if (record->active.has_value()) EndAttemptLocked(*record, false, why);
    TransitionLocked(*record, v1::CANCELLED, why, actor);
    ScheduleLocked();
  });
  if (!stored) return StoreUnavailable();
  return record->job;
}

void JobManager::PublishLocked(const JobRecord& record) {
  if (deferring_publish_) {
    unpublished_.push_back(&record);
    return;
  }
  auto snapshot = std::make_shared<const v1::Job>(record.job);
  std::lock_guard<std::mutex> lock(view_mutex_);
  view_[record.job.id()] = std::move(snapshot);
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

void JobManager::SendCancellation(const std::string& worker_id, const std::string& job_id,
                                  int attempt, const std::string& reason) {
  v1::CoordinatorMessage message;
  v1::Cancellation* cancellation = message.mutable_cancellation();
  cancellation->set_job_id(job_id);
  cancellation->set_attempt(attempt);
  cancellation->set_reason(reason);
  SendLocked(worker_id, message);
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

void JobManager::Tick() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (shutting_down_) return;
  // Nothing is expired or scheduled while the store cannot write: it could not be stored.
  if (!RecoverStoreLocked()) return;
  RunGroupedLocked([this] { TickLocked(); });
}

void JobManager::TickLocked() {
  for (const WorkerSnapshot& lost : workers_.ExpireSilentWorkers(now_())) {
    spdlog::warn("worker {} on {} lost: no heartbeat for {} ms", lost.info.id(),
                 lost.info.hostname(), workers_.config().heartbeat_timeout.count());
    // Its unconfirmed reports are resent if it comes back (and registers again); until then
    // nothing would confirm them.
    unconfirmed_reports_.erase(lost.info.id());
    const RankAssignment& assignment = lost.assignment;
    if (!assignment.active()) continue;
    JobRecord* record = ActiveRecordForLocked(lost.info.id(), assignment.job_id, assignment.attempt,
                                              assignment.rank);
    if (record != nullptr)
      FailAttemptLocked(*record, absl::StrCat("worker ", lost.info.id(), " lost"));
  }
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

// A worker found lost while a failed write was undone still holds its rank: fail it now.
void JobManager::FailAttemptsOnLostWorkersLocked() {
  for (auto& [id, record] : jobs_) {
    if (!record.active.has_value() || record.active->recovery_deadline.has_value()) continue;
    const ActiveAttempt& active = *record.active;
    for (size_t rank = 0; rank < active.worker_ids.size(); ++rank) {
      if (active.finished[rank]) continue;
      std::optional<WorkerSnapshot> worker = workers_.Find(active.worker_ids[rank]);
      if (worker.has_value() && worker->info.state() != v1::LOST) continue;
      FailAttemptLocked(record, absl::StrCat("worker ", active.worker_ids[rank], " lost"));
      break;
    }
  }
}

std::chrono::milliseconds JobManager::StartTimeout() const {
  if (config_.start_timeout.count() > 0) return config_.start_timeout;
  return workers_.config().heartbeat_timeout + RendezvousConfig{}.default_get_timeout;
}

void JobManager::ExpireUnstartedAttemptsLocked() {
  const Clock::time_point now = now_();
  for (auto& [id, record] : jobs_) {
    if (!record.active.has_value() || !record.active->start_deadline.has_value()) continue;
    ActiveAttempt& active = *record.active;
    const auto waiting = std::find(active.accepted.begin(), active.accepted.end(), false);
    if (waiting == active.accepted.end()) {
      active.start_deadline.reset();
      continue;
    }
    if (now < *active.start_deadline) continue;
    const size_t rank = static_cast<size_t>(waiting - active.accepted.begin());
    FailAttemptLocked(
        record, absl::StrCat("rank ", rank, " (worker ", active.worker_ids[rank],
                             ") did not accept its assignment within ", StartTimeout().count(),
                             " ms (the heartbeat timeout plus the rendezvous timeout)"));
  }
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
