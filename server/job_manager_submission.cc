// What clients ask of the job manager that changes a job: the spec check, submission and
// cancellation.
#include "absl/strings/str_cat.h"
#include "server/cluster_identity.h"
#include "server/job_manager.h"
#include "spdlog/spdlog.h"

namespace fsdpd::server {

std::vector<FieldError> JobManager::CheckSpec(const v1::JobSpec& spec, Role role) const {
  std::vector<FieldError> errors = ValidateJobSpec(spec);
  if (!errors.empty()) return errors;
  const int max_priority =
      role == Role::kAdmin ? config_.max_priority_admin : config_.max_priority_submitter;
  if (spec.priority() > max_priority) {
    errors.push_back(
        {"priority",
         absl::StrCat("must be at most ", max_priority, " for the role ", RoleName(role),
                      " (the coordinator's --max-priority), got ", spec.priority())});
  }
  if (spec.parallel().world_size() > config_.max_world_size) {
    errors.push_back(
        {"parallel.world_size", absl::StrCat("must be at most ", config_.max_world_size,
                                             " (the coordinator's --max-world-size), got ",
                                             spec.parallel().world_size())});
  }
  // What workers claim is admitted up to the ceiling (worker_registry.h); with no worker of the
  // kind registered yet, the ceiling alone bounds what any of them could be admitted with.
  const std::string& kind = spec.parallel().device();
  const int64_t largest = workers_.LargestMemory(kind);
  const int64_t ceiling = workers_.config().MemoryCeiling(kind);
  const int64_t needed = RankMemoryBytes(spec);
  if (largest > 0 && needed > largest) {
    errors.push_back(
        {"parallel.device",
         absl::StrCat("one rank needs about ", needed >> 20,
                      " MiB of device memory but the largest registered ", kind, " worker has ",
                      largest >> 20,
                      " MiB; raise parallel.world_size or shrink the model or batch")});
  } else if (largest == 0 && ceiling > 0 && needed > ceiling) {
    errors.push_back(
        {"parallel.device",
         absl::StrCat("one rank needs about ", needed >> 20, " MiB of device memory but a ", kind,
                      " worker is admitted with at most ", ceiling >> 20,
                      " MiB (--max-worker-memory); raise parallel.world_size or shrink the model "
                      "or batch")});
  }
  return errors;
}

absl::StatusOr<std::string> JobManager::Submit(const v1::JobSpec& spec, const std::string& owner,
                                               std::vector<FieldError>* field_errors, Role role) {
  if (std::vector<FieldError> errors = CheckSpec(spec, role); !errors.empty()) {
    absl::Status invalid = absl::InvalidArgumentError(FormatFieldErrors(errors));
    if (field_errors != nullptr) *field_errors = std::move(errors);
    return invalid;
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

}  // namespace fsdpd::server
