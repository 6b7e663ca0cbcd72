// The worker half of the job manager: registration and reconciliation, and what workers send on
// their session streams (heartbeats, step reports, logs, results, artifacts).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "proto/spec/job_spec.h"
#include "server/job_manager.h"
#include "spdlog/spdlog.h"

namespace fsdpd::server {

absl::StatusOr<v1::RegisterResponse> JobManager::RegisterWorker(const v1::RegisterRequest& request,
                                                                const std::string& principal) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (shutting_down_) return absl::UnavailableError("coordinator shutting down");
  absl::StatusOr<std::pair<std::string, RankAssignment>> registered =
      workers_.Register(request, now_(), principal);
  if (!registered.ok()) return registered.status();
  const auto& [worker_id, previous] = *registered;
  unconfirmed_reports_.erase(worker_id);
  ReconcileRegistrationLocked(worker_id, previous, request);
  spdlog::info("worker {} registered: {} {}:{} ({} MiB){}", worker_id, request.hostname(),
               request.device_kind(), request.gpu_index(), request.memory_bytes() >> 20,
               request.running_job_id().empty()
                   ? ""
                   : absl::StrCat(", running ", request.running_job_id(), " attempt ",
                                  request.running_attempt(), " rank ", request.running_rank()));
  v1::RegisterResponse response;
  response.set_worker_id(worker_id);
  response.set_heartbeat_interval_millis(workers_.config().heartbeat_interval.count());
  return response;
}

void JobManager::ReconcileRegistrationLocked(const std::string& worker_id,
                                             const RankAssignment& previous,
                                             const v1::RegisterRequest& request) {
  pending_cancellations_.erase(worker_id);
  const bool runs_previous = previous.active() && previous.job_id == request.running_job_id() &&
                             previous.attempt == request.running_attempt() &&
                             previous.rank == request.running_rank();
  if (previous.active() && !runs_previous) {
    // The worker process restarted and no longer runs the rank we gave it.
    if (JobRecord* record =
            ActiveRecordForLocked(worker_id, previous.job_id, previous.attempt, previous.rank)) {
      FailAttemptLocked(
          *record, absl::StrCat("worker ", worker_id, " restarted and lost rank ", previous.rank));
    }
  }
  if (request.running_job_id().empty()) return;
  JobRecord* record = ActiveRecordForLocked(worker_id, request.running_job_id(),
                                            request.running_attempt(), request.running_rank());
  if (record != nullptr) {
    record->active->reattached[request.running_rank()] = true;
    return;
  }
  // Work that no longer counts (the attempt ended while the worker was away): stop it. The
  // worker stays busy until it reports the cancellation.
  v1::Cancellation cancellation;
  cancellation.set_job_id(request.running_job_id());
  cancellation.set_attempt(request.running_attempt());
  cancellation.set_reason("the attempt is no longer active on the coordinator");
  pending_cancellations_[worker_id] = cancellation;
}

absl::Status JobManager::OpenSession(const std::string& worker_id,
                                     std::shared_ptr<WorkerSession> session,
                                     const std::string& principal) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (shutting_down_) return absl::UnavailableError("coordinator shutting down");
  // Only the credential the id is bound to may open its session (a takeover is refused).
  FSDPD_RETURN_IF_ERROR(workers_.CheckPrincipal(worker_id, principal));
  if (!workers_.AttachSession(worker_id, std::move(session))) {
    return absl::NotFoundError(
        absl::StrCat("unknown worker \"", worker_id, "\"; call Register before Session"));
  }
  workers_.Heartbeat(worker_id, now_());
  if (auto pending = pending_cancellations_.find(worker_id);
      pending != pending_cancellations_.end()) {
    v1::CoordinatorMessage message;
    *message.mutable_cancellation() = pending->second;
    workers_.Send(worker_id, message);
    pending_cancellations_.erase(pending);
  }
  if (store_writable_.load()) RunGroupedLocked([this] { ScheduleLocked(); });
  return absl::OkStatus();
}

void JobManager::CloseSession(const std::string& worker_id, const WorkerSession* session) {
  // Nothing fails here: the worker may reconnect within the heartbeat timeout and keep its work.
  workers_.DetachSession(worker_id, session);
}

void JobManager::NoteAlive(const std::string& worker_id) { workers_.Heartbeat(worker_id, now_()); }

void JobManager::OnWorkerMessage(const std::string& worker_id, const v1::WorkerMessage& message) {
  NoteAlive(worker_id);
  OnWorkerMessages({{&worker_id, &message}});
}

void JobManager::OnWorkerMessages(const std::vector<WorkerMessageRef>& messages) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (shutting_down_) return;
  if (!store_writable_.load() || !held_messages_.empty()) {
    // Held behind what could not be stored, in order; heartbeats are still answered.
    for (const WorkerMessageRef& ref : messages) {
      if (ref.message->has_heartbeat()) OnWorkerMessageLocked(*ref.worker_id, *ref.message);
    }
    HoldLocked(messages);
    return;
  }
  const bool stored = RunGroupedLocked([&] {
    for (const WorkerMessageRef& ref : messages) {
      OnWorkerMessageLocked(*ref.worker_id, *ref.message);
    }
  });
  if (!stored) HoldLocked(messages);
}

void JobManager::OnWorkerMessageLocked(const std::string& worker_id,
                                       const v1::WorkerMessage& message) {
  switch (message.payload_case()) {
    case v1::WorkerMessage::kHeartbeat: {
      v1::CoordinatorMessage ack;
      ack.mutable_heartbeat_ack()->set_unix_millis(absl::ToUnixMillis(absl::Now()));
      ConfirmStoredLocked(worker_id, &ack);
      workers_.Send(worker_id, ack);
      break;
    }
    case v1::WorkerMessage::kStep:
      OnStepLocked(worker_id, message.step());
      break;
    case v1::WorkerMessage::kLog:
      OnLogLocked(worker_id, message.log());
      break;
    case v1::WorkerMessage::kResult:
      OnResultLocked(worker_id, message.result());
      break;
    case v1::WorkerMessage::kArtifact:
      OnArtifactLocked(worker_id, message.artifact());
      break;
    case v1::WorkerMessage::kProfile:
      OnProfileLocked(worker_id, message.profile());
      break;
    case v1::WorkerMessage::kAccepted:
      OnAcceptedLocked(worker_id, message.accepted());
      break;
    case v1::WorkerMessage::PAYLOAD_NOT_SET:
      break;
  }
}

JobManager::JobRecord* JobManager::ActiveRecordForLocked(const std::string& worker_id,
                                                         const std::string& job_id, int attempt,
                                                         int rank, const std::string& job_uid) {
  JobRecord* record = FindLocked(job_id);
  if (record == nullptr || !record->active.has_value()) return nullptr;
  if (!job_uid.empty() && job_uid != record->job.uid()) return nullptr;
  const ActiveAttempt& active = *record->active;
  if (active.attempt != attempt || rank < 0 || rank >= static_cast<int>(active.worker_ids.size()) ||
      active.worker_ids[rank] != worker_id || active.finished[rank]) {
    return nullptr;
  }
  return record;
}

void JobManager::OnAcceptedLocked(const std::string& worker_id,
                                  const v1::AssignmentAccepted& accepted) {
  JobRecord* record = ActiveRecordForLocked(worker_id, accepted.job_id(), accepted.attempt(),
                                            accepted.rank(), accepted.job_uid());
  if (record == nullptr) return;  // an attempt that already ended
  SnapshotLocked(*record);
  record->active->accepted[accepted.rank()] = true;
  spdlog::info("{} attempt {}: rank {} accepted by worker {}", accepted.job_id(),
               accepted.attempt(), accepted.rank(), worker_id);
}

void JobManager::OnStepLocked(const std::string& worker_id, const v1::StepReport& report) {
  JobRecord* record = ActiveRecordForLocked(worker_id, report.job_id(), report.attempt(),
                                            report.rank(), report.job_uid());
  if (record == nullptr) {
    spdlog::debug("ignoring a step report of {} attempt {} rank {} from worker {}", report.job_id(),
                  report.attempt(), report.rank(), worker_id);
    // Nothing to store: the worker may forget it.
    NoteUnconfirmedLocked(worker_id, {false, 0, report.job_id(), report.attempt(), report.step()});
    return;
  }
  SnapshotLocked(*record);
  // A report proves the rank is alive and started, whatever the worker said when it registered.
  record->active->reattached[report.rank()] = true;
  record->active->accepted[report.rank()] = true;
  absl::StatusOr<int64_t> number = store_.AppendStepReport(report);
  LogStoreError(number.status(), "step report");
  if (number.ok()) {
    NoteUnconfirmedLocked(worker_id,
                          {false, *number, report.job_id(), report.attempt(), report.step()});
  }
  int64_t& last_reported = record->active->last_reported_step[report.rank()];
  const bool resent = report.step() <= last_reported;
  last_reported = std::max(last_reported, report.step());
  if (observer_ != nullptr && !resent) {
    if (std::optional<WorkerSnapshot> worker = workers_.Find(worker_id)) {
      observer_->OnRankStep(report, worker->info);
    }
  }
  if (record->job.state() == v1::SCHEDULED) {
    TransitionLocked(*record, v1::RUNNING, "first step reported");
  }
  ActiveAttempt& active = *record->active;
  if (report.step() <= active.last_aggregated_step) return;
  const int world_size = static_cast<int>(active.worker_ids.size());
  StepAccumulator& step = active.steps[report.step()];
  if (step.ranks.empty()) step.ranks.assign(world_size, false);
  if (step.ranks[report.rank()]) return;  // a duplicate sent again after a reconnect
  step.ranks[report.rank()] = true;
  ++step.reported;
  if (report.rank() == 0) step.rank_zero = report;
  step.tokens_per_second += report.tokens_per_second();
  step.mfu_sum += report.mfu_ratio();
  step.step_seconds = std::max(step.step_seconds, report.step_seconds());
  step.memory_peak_bytes = std::max(step.memory_peak_bytes, report.memory_peak_bytes());
  step.memory_current_bytes = std::max(step.memory_current_bytes, report.memory_current_bytes());
  step.memory_reserved_bytes = std::max(step.memory_reserved_bytes, report.memory_reserved_bytes());
  if (step.reported < world_size) return;

  // Ranks all-reduce the loss, so rank 0's is the global mean; throughput adds up over ranks.
  v1::StepReport aggregate = step.rank_zero;
  aggregate.set_tokens_per_second(step.tokens_per_second);
  aggregate.set_mfu_ratio(step.mfu_sum / world_size);
  aggregate.set_step_seconds(step.step_seconds);
  aggregate.set_memory_peak_bytes(step.memory_peak_bytes);
  aggregate.set_memory_current_bytes(step.memory_current_bytes);
  aggregate.set_memory_reserved_bytes(step.memory_reserved_bytes);
  active.last_aggregated_step = report.step();
  // Steps below this one can no longer complete in order; drop what they collected.
  active.steps.erase(active.steps.begin(), active.steps.upper_bound(report.step()));

  v1::Job& job = record->job;
  job.set_step(aggregate.step());
  job.set_loss(aggregate.loss());
  job.set_tokens_per_second(aggregate.tokens_per_second());
  LogStoreError(store_.RecordStep(job, record->next_sequence++, aggregate), "step");
  PublishLocked(*record);
  v1::JobEvent event;
  *event.mutable_step() = aggregate;
  NotifyLocked(*record, [event](const auto& subscriber) { subscriber->OnEvent(event); });
  if (observer_ != nullptr) observer_->OnAggregateStep(aggregate);
}

void JobManager::NoteUnconfirmedLocked(const std::string& worker_id, UnconfirmedReport report) {
  // Bounded like the worker's own buffer. Dropping the oldest entry loses nothing: rows are
  // stored in the order they were appended, so a later confirmation covers it.
  constexpr size_t kMaxUnconfirmed = 20000;
  std::deque<UnconfirmedReport>& unconfirmed = unconfirmed_reports_[worker_id];
  if (unconfirmed.size() >= kMaxUnconfirmed) unconfirmed.pop_front();
  unconfirmed.push_back(std::move(report));
}

void JobManager::ConfirmStoredLocked(const std::string& worker_id, v1::CoordinatorMessage* ack) {
  auto found = unconfirmed_reports_.find(worker_id);
  if (found == unconfirmed_reports_.end()) return;
  std::deque<UnconfirmedReport>& unconfirmed = found->second;
  const int64_t stored_steps = store_.StoredStepReports();
  const int64_t stored_logs = store_.StoredLogs();
  // Each kind is stored in the order it was appended, so its stored rows are a prefix (ignored
  // ones, number 0, count as stored). A worker runs one attempt at a time: consecutive entries
  // of one (job, attempt) become one confirmation of the highest step and line.
  v1::ReportsStored* last = nullptr;
  while (!unconfirmed.empty() &&
         unconfirmed.front().number <= (unconfirmed.front().log ? stored_logs : stored_steps)) {
    const UnconfirmedReport& report = unconfirmed.front();
    if (last == nullptr || last->job_id() != report.job_id || last->attempt() != report.attempt) {
      last = ack->add_reports_stored();
      last->set_job_id(report.job_id);
      last->set_attempt(report.attempt);
    }
    if (report.log) {
      last->set_through_log_sequence(std::max(last->through_log_sequence(), report.position));
    } else {
      last->set_through_step(std::max(last->through_step(), report.position));
    }
    unconfirmed.pop_front();
  }
  if (unconfirmed.empty()) unconfirmed_reports_.erase(found);
}

void JobManager::OnResultLocked(const std::string& worker_id, const v1::AttemptResult& result) {
  workers_.Release(worker_id, result.job_id(), result.attempt());
  JobRecord* record = ActiveRecordForLocked(worker_id, result.job_id(), result.attempt(),
                                            result.rank(), result.job_uid());
  if (record == nullptr) {
    // The result of an attempt that already ended (cancelled, failed elsewhere): the worker
    // is free again and nothing else changes.
    ScheduleLocked();
    return;
  }
  SnapshotLocked(*record);
  ActiveAttempt& active = *record->active;
  active.finished[result.rank()] = true;
  active.accepted[result.rank()] = true;
  if (!result.ok()) {
    const std::string error = result.cancelled() ? "stopped before the end" : result.error();
    const std::string reason = absl::StrCat("rank ", result.rank(), " (worker ", worker_id,
                                            ") failed: ", error.empty() ? "no error given" : error);
    if (result.permanent() && !result.cancelled()) {
      // Bad input fails the same way on every try: no retry.
      EndAttemptLocked(*record, false, reason);
      TransitionLocked(*record, v1::FAILED, absl::StrCat(reason, " (bad input; not retried)"));
    } else {
      FailAttemptLocked(*record, reason);
    }
  } else if (std::all_of(active.finished.begin(), active.finished.end(),
                         [](bool finished) { return finished; })) {
    const int world_size = static_cast<int>(active.worker_ids.size());
    v1::Job& job = record->job;
    if (result.final_step() >= job.step()) {
      job.set_step(result.final_step());
      if (result.rank() == 0 || job.loss() == 0) job.set_loss(result.final_loss());
    }
    const std::string reason =
        absl::StrCat("all ", world_size, " ranks finished at step ", job.step());
    EndAttemptLocked(*record, true, reason);
    TransitionLocked(*record, v1::SUCCEEDED, reason);
  }
  ScheduleLocked();
}

void JobManager::OnLogLocked(const std::string& worker_id, const v1::LogLine& line) {
  JobRecord* record = FindLocked(line.job_id());
  std::optional<WorkerSnapshot> worker = workers_.Find(worker_id);
  const bool assigned = worker.has_value() && worker->assignment.job_id == line.job_id();
  const bool numbered = line.sequence() > 0;
  if (record == nullptr ||
      !(assigned || ActiveRecordForLocked(worker_id, line.job_id(), line.attempt(), line.rank()))) {
    // Nothing to store: the worker may forget it.
    if (numbered) {
      NoteUnconfirmedLocked(worker_id, {true, 0, line.job_id(), line.attempt(), line.sequence()});
    }
    return;
  }
  v1::LogLine stored = line;
  if (stored.unix_millis() == 0) stored.set_unix_millis(absl::ToUnixMillis(absl::Now()));
  if (stored.level().empty()) stored.set_level("info");
  const auto line_bytes = static_cast<int64_t>(stored.text().size());
  if (record->log_bytes + line_bytes > config_.max_log_bytes_per_job) {
    // Over the job's log budget: one marker line, then nothing; the worker may forget the line.
    if (!record->log_limit_noted) {
      record->log_limit_noted = true;
      v1::LogLine marker = stored;
      marker.set_sequence(0);
      marker.set_level("warning");
      marker.set_text(absl::StrCat("fsdpd: this job's stored log reached --max-log-bytes-per-job (",
                                   config_.max_log_bytes_per_job,
                                   " bytes); later lines are dropped"));
      LogStoreError(store_.AppendLog(marker).status(), "log line");
      NotifyLocked(*record, [marker](const auto& subscriber) { subscriber->OnLog(marker); });
    }
    if (numbered) {
      NoteUnconfirmedLocked(worker_id, {true, 0, line.job_id(), line.attempt(), line.sequence()});
    }
    return;
  }
  record->log_bytes += line_bytes;
  absl::StatusOr<int64_t> number = store_.AppendLog(stored);
  LogStoreError(number.status(), "log line");
  if (numbered && number.ok()) {
    NoteUnconfirmedLocked(worker_id,
                          {true, *number, line.job_id(), line.attempt(), line.sequence()});
  }
  // A resent line is stored once (the store ignores the copy) and not shown to followers again.
  if (numbered && record->active.has_value() && record->active->attempt == line.attempt() &&
      line.rank() >= 0 &&
      line.rank() < static_cast<int>(record->active->last_log_sequence.size())) {
    SnapshotLocked(*record);
    int64_t& last = record->active->last_log_sequence[line.rank()];
    const bool resent = line.sequence() <= last;
    last = std::max(last, line.sequence());
    if (resent) return;
  }
  NotifyLocked(*record, [stored](const auto& subscriber) { subscriber->OnLog(stored); });
}

void JobManager::OnArtifactLocked(const std::string& worker_id, const v1::ArtifactChunk& chunk) {
  JobRecord* record = ActiveRecordForLocked(worker_id, chunk.job_id(), chunk.attempt(), 0);
  if (record == nullptr) {
    spdlog::warn(
        "ignoring an artifact chunk of {} attempt {} from worker {}: not rank 0 of an active "
        "attempt",
        chunk.job_id(), chunk.attempt(), worker_id);
    return;
  }
  const int64_t limit = ExportedModelBytesLimit(record->job.spec().model());
  if (absl::Status status = artifacts_.WriteChunk(chunk, limit); !status.ok()) {
    // A job never succeeds without its model: the attempt fails (and retries) with the reason.
    spdlog::error("{}: artifact upload failed: {}", chunk.job_id(), status.ToString());
    FailAttemptLocked(*record, absl::StrCat("rank 0's model upload failed: ", status.message()));
  } else if (chunk.last()) {
    spdlog::info("{}: artifact {} stored", chunk.job_id(), chunk.name());
  }
}

void JobManager::OnProfileLocked(const std::string& worker_id, const v1::ProfileReport& report) {
  if (ActiveRecordForLocked(worker_id, report.job_id(), report.attempt(), report.rank()) ==
      nullptr) {
    spdlog::debug("ignoring a profile of {} attempt {} rank {} from worker {}", report.job_id(),
                  report.attempt(), report.rank(), worker_id);
    return;
  }
  if (absl::Status status = profiles_.Write(report); !status.ok()) {
    spdlog::error("{}: storing the profile of rank {} failed: {}", report.job_id(), report.rank(),
                  status.ToString());
    return;
  }
  if (report.kernels_size() > 0 && observer_ != nullptr) observer_->OnProfile(report);
}

}  // namespace fsdpd::server
