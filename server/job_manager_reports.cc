// What workers report on their sessions: step reports (aggregated over the ranks), attempt
// results, log lines, artifact chunks and profiles; and the confirmations that tell a worker
// which of its reports are stored.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "proto/spec/job_spec.h"
#include "server/job_manager.h"
#include "spdlog/spdlog.h"

namespace fsdpd::server {

void JobManager::OnStepLocked(const std::string& worker_id, const v1::StepReport& report,
                              bool live) {
  JobRecord* record = ActiveRecordForLocked(worker_id, report.job_id(), report.attempt(),
                                            report.rank(), report.job_uid());
  if (record == nullptr) {
    spdlog::debug("ignoring a step report of {} attempt {} rank {} from worker {}", report.job_id(),
                  report.attempt(), report.rank(), worker_id);
    // Nothing to store: the worker may forget it.
    NoteUnconfirmedLocked(worker_id, {false, 0, report.job_id(), report.attempt(), report.step()});
    return;
  }
  {
    // A report that can only count toward its step is undone entry by entry if the run's
    // commit fails; one that may complete the step or start the job snapshots the record.
    const ActiveAttempt& active = *record->active;
    const auto counted = active.steps.find(report.step());
    const int reported = counted == active.steps.end() ? 0 : counted->second.reported;
    if (record->job.state() == v1::SCHEDULED ||
        reported + 1 >= static_cast<int>(active.worker_ids.size())) {
      SnapshotLocked(*record);
    } else {
      NoteStepUndoLocked(*record, report);
    }
  }
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
  if (observer_ != nullptr && !resent && live) {
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
  PublishLocked(*record, /*progress_only=*/true);
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
  const bool numbered = line.sequence() > 0;
  // A worker writes only into the rank the coordinator assigned to it (a bare claim made at
  // registration is no assignment): a numbered line only as that attempt and rank, so no other
  // worker can take a line's number, which the store keeps once per (job, attempt, rank).
  std::optional<WorkerSnapshot> worker = workers_.Find(worker_id);
  const RankAssignment assigned =
      worker.has_value() && worker->assignment.active() ? worker->assignment : RankAssignment{};
  const bool runs_job = assigned.active() && assigned.job_id == line.job_id();
  const bool as_assigned =
      runs_job &&
      (!numbered || (assigned.attempt == line.attempt() && assigned.rank == line.rank()));
  if (record == nullptr ||
      !(as_assigned ||
        ActiveRecordForLocked(worker_id, line.job_id(), line.attempt(), line.rank()) != nullptr)) {
    if (record != nullptr && !runs_job) {
      spdlog::debug("ignoring a log line of {} attempt {} rank {} from worker {}: not its rank",
                    line.job_id(), line.attempt(), line.rank(), worker_id);
    }
    // Nothing to store: the worker may forget it.
    if (numbered) {
      NoteUnconfirmedLocked(worker_id, {true, 0, line.job_id(), line.attempt(), line.sequence()});
    }
    return;
  }
  v1::LogLine stored = line;
  if (!numbered && runs_job) {
    // An unnumbered line (the worker's own notes) is filed under the rank it was assigned.
    stored.set_attempt(assigned.attempt);
    stored.set_rank(assigned.rank);
  }
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
