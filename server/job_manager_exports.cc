// Checkpoints and their exports. Rank 0 reports each checkpoint it commits (CheckpointCommitted,
// with the steps still committed after pruning); the coordinator stores it with the hosts of the
// attempt that wrote it. An export of a checkpoint is prepared by an idle worker on one of those
// hosts, which consolidates the rank files into one safetensors file and uploads it as an
// artifact named model-step-<8 digits>.safetensors; while it does, the fleet the scheduler sees
// shows it taking no rank. Exports live in memory, one per (job, step): a worker lost or
// restarted mid-export sends its export back to waiting, and a coordinator restart forgets them
// (the next PrepareExport asks again; artifacts already uploaded stay READY).
#include <algorithm>
#include <filesystem>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "proto/spec/job_spec.h"
#include "server/job_manager.h"
#include "spdlog/spdlog.h"

namespace fsdpd::server {
namespace {

// Bounds the exports in flight (each holds a worker while it runs).
constexpr size_t kMaxExports = 64;

// NOT_FOUND for a step the job has no checkpoint of, naming the steps it has.
absl::Status NoSuchCheckpoint(const std::string& job_id, int64_t step,
                              const std::vector<CheckpointRecord>& checkpoints) {
  std::vector<int64_t> steps;
  for (const CheckpointRecord& checkpoint : checkpoints) steps.push_back(checkpoint.step);
  return absl::NotFoundError(absl::StrCat(
      "job ", job_id, " has no complete checkpoint of step ", step,
      steps.empty() ? "; it has none"
                    : absl::StrCat("; its checkpoints are at steps ", absl::StrJoin(steps, ", "))));
}

const CheckpointRecord* FindStep(const std::vector<CheckpointRecord>& checkpoints, int64_t step) {
  for (const CheckpointRecord& checkpoint : checkpoints) {
    if (checkpoint.step == step) return &checkpoint;
  }
  return nullptr;
}

int64_t FileSize(const std::string& path) {
  std::error_code error;
  const uintmax_t size = std::filesystem::file_size(path, error);
  return error ? 0 : static_cast<int64_t>(size);
}

v1::ExportStatus Ready(int64_t step, const std::string& path) {
  v1::ExportStatus status;
  status.set_state(v1::ExportStatus::READY);
  status.set_step(step);
  status.set_size_bytes(FileSize(path));
  status.set_message(absl::StrCat("step ", step, " is ready to export"));
  return status;
}

}  // namespace

std::vector<std::string> JobManager::AttemptHostsLocked(const JobRecord& record, int attempt) {
  std::vector<std::string> worker_ids;
  if (record.active.has_value() && record.active->attempt == attempt) {
    worker_ids = record.active->worker_ids;
  } else if (absl::StatusOr<std::vector<AssignmentRecord>> stored =
                 store_.LoadAssignments(record.job.id(), attempt);
             stored.ok()) {
    for (const AssignmentRecord& assignment : *stored) worker_ids.push_back(assignment.worker_id);
  }
  std::set<std::string> hosts;
  for (const std::string& worker_id : worker_ids) {
    if (std::optional<WorkerSnapshot> worker = workers_.Find(worker_id)) {
      if (!worker->info.hostname().empty()) hosts.insert(worker->info.hostname());
    }
  }
  return {hosts.begin(), hosts.end()};
}

void JobManager::OnCheckpointLocked(const std::string& worker_id,
                                    const v1::CheckpointCommitted& checkpoint) {
  // Confirmed once this run's writes are committed, whether stored or ignored: the worker may
  // forget it then.
  v1::CoordinatorMessage ack;
  v1::ReportsStored* stored = ack.add_reports_stored();
  stored->set_job_id(checkpoint.job_id());
  stored->set_attempt(checkpoint.attempt());
  stored->set_through_checkpoint_step(checkpoint.step());
  SendLocked(worker_id, ack);

  const JobRecord* record = FindLocked(checkpoint.job_id());
  if (record == nullptr ||
      (!checkpoint.job_uid().empty() && checkpoint.job_uid() != record->job.uid())) {
    spdlog::debug("ignoring a checkpoint of {} from worker {}: no such job", checkpoint.job_id(),
                  worker_id);
    return;
  }
  // Only rank 0 of the attempt commits: its worker, as this coordinator assigned it (the attempt
  // may have ended since, e.g. cancelled right after the commit), or as the store says.
  bool rank_zero = false;
  if (record->active.has_value() && record->active->attempt == checkpoint.attempt()) {
    rank_zero = !record->active->worker_ids.empty() && record->active->worker_ids[0] == worker_id;
  } else if (absl::StatusOr<std::vector<AssignmentRecord>> assignments =
                 store_.LoadAssignments(checkpoint.job_id(), checkpoint.attempt());
             assignments.ok()) {
    for (const AssignmentRecord& assignment : *assignments) {
      rank_zero = rank_zero || (assignment.rank == 0 && assignment.worker_id == worker_id);
    }
  }
  if (!rank_zero || checkpoint.step() <= 0) {
    spdlog::warn(
        "ignoring a checkpoint of {} attempt {} step {} from worker {}: not rank 0 of that "
        "attempt",
        checkpoint.job_id(), checkpoint.attempt(), checkpoint.step(), worker_id);
    return;
  }
  CheckpointRecord row;
  row.job_id = checkpoint.job_id();
  row.step = checkpoint.step();
  row.commit_unix_millis = checkpoint.unix_millis();
  row.size_bytes = checkpoint.size_bytes();
  row.attempt = checkpoint.attempt();
  row.world_size = checkpoint.world_size();
  row.hosts = AttemptHostsLocked(*record, checkpoint.attempt());
  const std::vector<int64_t> committed(checkpoint.committed_steps().begin(),
                                       checkpoint.committed_steps().end());
  LogStoreError(store_.RecordCheckpoint(row, committed), "checkpoint");
}

absl::StatusOr<std::vector<CheckpointRecord>> JobManager::ListCheckpoints(
    const std::string& job_id) const {
  {
    std::lock_guard<std::mutex> lock(view_mutex_);
    if (view_.count(job_id) == 0)
      return absl::NotFoundError(absl::StrCat("job ", job_id, " not found"));
  }
  return store_.LoadCheckpoints(job_id);
}

bool JobManager::ExportingLocked(const std::string& worker_id) const {
  for (const auto& [key, task] : exports_) {
    if (task.worker_id == worker_id && task.failure.empty()) return true;
  }
  return false;
}

void JobManager::ForgetExportsOfLocked(const std::string& worker_id) {
  for (auto& [key, task] : exports_) {
    if (task.worker_id == worker_id) task.worker_id.clear();
  }
}

bool JobManager::DispatchExportLocked(const JobRecord& record, const CheckpointRecord& checkpoint,
                                      ExportTask& task) {
  for (const IdleWorker& idle : workers_.IdleWorkers()) {
    if (!idle.can_checkpoint || ExportingLocked(idle.id)) continue;
    std::optional<WorkerSnapshot> worker = workers_.Find(idle.id);
    if (!worker.has_value() || std::find(checkpoint.hosts.begin(), checkpoint.hosts.end(),
                                         worker->info.hostname()) == checkpoint.hosts.end()) {
      continue;
    }
    v1::CoordinatorMessage message;
    v1::ExportRequest* request = message.mutable_export_request();
    request->set_job_id(record.job.id());
    request->set_job_uid(record.job.uid());
    request->set_step(checkpoint.step);
    request->set_world_size(checkpoint.world_size);
    *request->mutable_model() = record.job.spec().model();
    request->set_artifact_name(ArtifactStore::CheckpointArtifactName(checkpoint.step));
    SendLocked(idle.id, message);
    task.worker_id = idle.id;
    spdlog::info("{}: worker {} on {} exports the checkpoint of step {}", record.job.id(), idle.id,
                 worker->info.hostname(), checkpoint.step);
    return true;
  }
  return false;
}

absl::StatusOr<v1::ExportStatus> JobManager::PrepareExport(const std::string& job_id,
                                                           int64_t step) {
  // Read before taking the lock: the store's connection may be busy with a batch.
  absl::StatusOr<std::vector<CheckpointRecord>> checkpoints = store_.LoadCheckpoints(job_id);
  std::lock_guard<std::mutex> lock(mutex_);
  if (shutting_down_) return absl::UnavailableError("coordinator shutting down");
  const JobRecord* record = FindLocked(job_id);
  if (record == nullptr) return absl::NotFoundError(absl::StrCat("job ", job_id, " not found"));
  if (step < 0) {
    return absl::InvalidArgumentError(absl::StrCat("step must not be negative (got ", step, ")"));
  }
  if (step == 0 && record->job.state() == v1::SUCCEEDED) {
    if (absl::StatusOr<std::string> path = artifacts_.Find(job_id, ArtifactStore::kModelArtifact);
        path.ok()) {
      return Ready(0, *path);
    }
  }
  if (!checkpoints.ok()) return checkpoints.status();
  if (step == 0) {
    if (checkpoints->empty()) {
      return absl::NotFoundError(
          absl::StrCat("job ", job_id, " (", v1::JobState_Name(record->job.state()),
                       ") has no exported model and no complete checkpoint to export"));
    }
    step = checkpoints->front().step;
  }
  const std::pair<std::string, int64_t> key(job_id, step);
  const CheckpointRecord* checkpoint = FindStep(*checkpoints, step);
  if (checkpoint == nullptr) {
    // Pruned since an export of it was asked for: a waiting export of it waits no more.
    if (auto waiting = exports_.find(key);
        waiting != exports_.end() && waiting->second.worker_id.empty()) {
      exports_.erase(waiting);
    }
    return NoSuchCheckpoint(job_id, step, *checkpoints);
  }
  if (absl::StatusOr<std::string> path =
          artifacts_.Find(job_id, ArtifactStore::CheckpointArtifactName(step));
      path.ok()) {
    exports_.erase(key);
    return Ready(step, *path);
  }
  auto found = exports_.find(key);
  if (found == exports_.end()) {
    if (exports_.size() >= kMaxExports) {
      return absl::ResourceExhaustedError(absl::StrCat(
          kMaxExports, " checkpoint exports are in flight; try again once some are done"));
    }
    found = exports_.emplace(key, ExportTask{job_id, step, "", ""}).first;
  }
  ExportTask& task = found->second;
  v1::ExportStatus status;
  status.set_step(step);
  if (!task.failure.empty()) {
    status.set_state(v1::ExportStatus::FAILED);
    status.set_message(absl::StrCat("exporting step ", step, " failed: ", task.failure));
    exports_.erase(found);
    return status;
  }
  if (!task.worker_id.empty()) {
    std::optional<WorkerSnapshot> worker = workers_.Find(task.worker_id);
    if (!worker.has_value() || !worker->connected || worker->info.state() == v1::LOST) {
      spdlog::warn("{}: worker {} was lost while exporting step {}; the export waits again", job_id,
                   task.worker_id, step);
      task.worker_id.clear();
    }
  }
  if (task.worker_id.empty() && !DispatchExportLocked(*record, *checkpoint, task)) {
    status.set_state(v1::ExportStatus::PREPARING);
    status.set_message(checkpoint->hosts.empty()
                           ? absl::StrCat("no host is known to hold step ", step)
                           : absl::StrCat("waiting for an idle worker on ",
                                          absl::StrJoin(checkpoint->hosts, " or ")));
    return status;
  }
  std::optional<WorkerSnapshot> worker = workers_.Find(task.worker_id);
  status.set_state(v1::ExportStatus::PREPARING);
  status.set_worker_id(task.worker_id);
  status.set_message(absl::StrCat("worker ", task.worker_id, " on ",
                                  worker.has_value() ? worker->info.hostname() : "?",
                                  " is consolidating step ", step));
  return status;
}

absl::StatusOr<std::string> JobManager::CheckpointExportPath(const std::string& job_id,
                                                             int64_t step) {
  if (absl::StatusOr<std::string> path =
          artifacts_.Find(job_id, ArtifactStore::CheckpointArtifactName(step));
      path.ok()) {
    return path;
  }
  absl::StatusOr<std::vector<CheckpointRecord>> checkpoints = ListCheckpoints(job_id);
  if (!checkpoints.ok()) return checkpoints.status();
  if (FindStep(*checkpoints, step) == nullptr) return NoSuchCheckpoint(job_id, step, *checkpoints);
  return absl::FailedPreconditionError(absl::StrCat("step ", step, " of job ", job_id,
                                                    " is not prepared for export: call "
                                                    "PrepareExport first (fsdpctl export does)"));
}

void JobManager::OnExportChunkLocked(const std::string& worker_id, const v1::ArtifactChunk& chunk) {
  ExportTask* task = nullptr;
  for (auto& [key, candidate] : exports_) {
    if (candidate.job_id == chunk.job_id() && candidate.worker_id == worker_id &&
        ArtifactStore::CheckpointArtifactName(candidate.step) == chunk.name()) {
      task = &candidate;
    }
  }
  const JobRecord* record = FindLocked(chunk.job_id());
  if (task == nullptr || record == nullptr) {
    spdlog::warn("ignoring an export chunk {} of {} from worker {}: no export asked of it",
                 chunk.name().substr(0, 64), chunk.job_id(), worker_id);
    return;
  }
  if (!task->failure.empty()) return;
  const int64_t limit = ExportedModelBytesLimit(record->job.spec().model());
  if (absl::Status status = artifacts_.WriteChunk(chunk, limit); !status.ok()) {
    spdlog::error("{}: export upload of step {} failed: {}", chunk.job_id(), task->step,
                  status.ToString());
    task->failure = absl::StrCat("the upload failed: ", status.message());
  }
}

void JobManager::OnExportResultLocked(const std::string& worker_id,
                                      const v1::ExportResult& result) {
  auto found = exports_.find({result.job_id(), result.step()});
  if (found == exports_.end() || found->second.worker_id != worker_id) {
    spdlog::info("ignoring an export result of {} step {} from worker {}: not asked of it",
                 result.job_id(), result.step(), worker_id);
    ScheduleLocked();
    return;
  }
  ExportTask& task = found->second;
  if (task.failure.empty() && !result.ok()) {
    task.failure = result.error().empty() ? "the worker gave no reason" : result.error();
  }
  if (task.failure.empty() &&
      !artifacts_.Find(result.job_id(), ArtifactStore::CheckpointArtifactName(result.step()))
           .ok()) {
    task.failure = "the worker reported success but its upload did not arrive";
  }
  if (task.failure.empty()) {
    spdlog::info("{}: the checkpoint of step {} is exported ({} bytes)", result.job_id(),
                 result.step(), result.size_bytes());
    exports_.erase(found);
  } else {
    spdlog::warn("{}: exporting step {} failed: {}", result.job_id(), result.step(), task.failure);
    task.worker_id.clear();
  }
  ScheduleLocked();  // the worker takes ranks again
}

}  // namespace fsdpd::server
