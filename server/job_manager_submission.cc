// What clients ask of the job manager that changes a job: the spec check, submission (with its
// labels and origin: where the spec and the initial weights come from) and cancellation.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/text_format.h"
#include "server/cluster_identity.h"
#include "server/job_labels.h"
#include "server/job_manager.h"
#include "spdlog/spdlog.h"

namespace fsdpd::server {
namespace {

constexpr int kMaxOverrides = 100;
constexpr size_t kMaxOverrideBytes = 1024;

// A field's value as text ("unset" when it is not set).
std::string FieldText(const google::protobuf::Message& message,
                      const google::protobuf::FieldDescriptor* field) {
  if (!message.GetReflection()->HasField(message, field)) return "unset";
  std::string text;
  google::protobuf::TextFormat::PrintFieldValueToString(message, field, -1, &text);
  return text;
}

// "model.dim is 64 here but 128 in job-000001", one per differing field of the model section.
std::vector<std::string> ModelDifferences(const v1::ModelSpec& here, const v1::ModelSpec& there,
                                          const std::string& there_id) {
  std::vector<std::string> differences;
  const google::protobuf::Descriptor* descriptor = v1::ModelSpec::descriptor();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* field = descriptor->field(i);
    const std::string a = FieldText(here, field);
    const std::string b = FieldText(there, field);
    if (a == b) continue;
    differences.push_back(
        absl::StrCat("model.", field->name(), " is ", a, " here but ", b, " in ", there_id));
  }
  return differences;
}

}  // namespace

std::vector<FieldError> JobManager::ResolveOriginLocked(const SubmitDetails& details,
                                                        v1::JobSpec* spec,
                                                        v1::JobOrigin* origin) const {
  std::vector<FieldError> errors;
  *origin = details.origin;
  if (!origin->resubmitted_from().empty() && FindLocked(origin->resubmitted_from()) == nullptr) {
    errors.push_back({"origin.resubmitted_from",
                      absl::StrCat("no job with id \"", origin->resubmitted_from(), "\"")});
  }
  if (origin->overrides_size() > kMaxOverrides) {
    errors.push_back(
        {"origin.overrides",
         absl::StrCat("at most ", kMaxOverrides, " overrides, got ", origin->overrides_size())});
  }
  for (int i = 0; i < origin->overrides_size(); ++i) {
    if (origin->overrides(i).size() > kMaxOverrideBytes) {
      errors.push_back({absl::StrCat("origin.overrides[", i, "]"),
                        absl::StrCat("at most ", kMaxOverrideBytes, " bytes, got ",
                                     origin->overrides(i).size())});
    }
  }
  if (!origin->has_weights_from()) return errors;
  const v1::CheckpointRef& from = origin->weights_from();
  if (from.job_id().empty()) {
    errors.push_back(
        {"origin.weights_from.job_id", "must name the job whose weights to start from"});
    return errors;
  }
  if (from.step() < 0) {
    errors.push_back({"origin.weights_from.step",
                      absl::StrCat("must be 0 (the newest checkpoint) or a checkpoint's step, got ",
                                   from.step())});
    return errors;
  }
  if (!spec->checkpoint().init_from().empty()) {
    errors.push_back({"checkpoint.init_from",
                      absl::StrCat("cannot be set together with --from ", from.job_id(),
                                   " (origin.weights_from): the initial weights come from one "
                                   "or the other")});
  }
  // Visible as GetJob shows it: every caller that may submit may read every job (docs/security.md).
  const JobRecord* source = FindLocked(from.job_id());
  if (source == nullptr) {
    errors.push_back({"origin.weights_from.job_id",
                      absl::StrCat("no job with id \"", from.job_id(), "\" to take weights from")});
    return errors;
  }
  for (const std::string& difference :
       ModelDifferences(spec->model(), source->job.spec().model(), from.job_id())) {
    errors.push_back({"model", absl::StrCat(difference,
                                            "; --from needs the same model (the "
                                            "world size may differ)")});
  }
  // The checkpoints table that rank 0's reports fill (job_manager_exports.cc).
  absl::StatusOr<std::vector<CheckpointRecord>> records = store_.LoadCheckpoints(from.job_id());
  absl::StatusOr<std::vector<int64_t>> steps = std::vector<int64_t>{};
  if (!records.ok()) steps = records.status();
  for (const CheckpointRecord& record : records.ok() ? *records : std::vector<CheckpointRecord>{}) {
    steps->push_back(record.step);
  }
  if (!steps.ok()) {
    errors.push_back(
        {"origin.weights_from", absl::StrCat("the checkpoints of ", from.job_id(),
                                             " cannot be read: ", steps.status().message())});
    return errors;
  }
  if (steps->empty()) {
    errors.push_back(
        {"origin.weights_from", absl::StrCat(from.job_id(), " has no complete checkpoint")});
    return errors;
  }
  int64_t step = steps->front();
  if (from.step() != 0) {
    if (std::find(steps->begin(), steps->end(), from.step()) == steps->end()) {
      std::vector<std::string> listed;
      for (int64_t kept : *steps) listed.push_back(absl::StrCat(kept));
      errors.push_back(
          {"origin.weights_from.step",
           absl::StrCat(from.job_id(), " has no complete checkpoint at step ", from.step(),
                        "; its complete checkpoints are at steps ", absl::StrJoin(listed, ", "))});
      return errors;
    }
    step = from.step();
  }
  if (!errors.empty()) return errors;
  origin->mutable_weights_from()->set_step(step);
  spec->mutable_checkpoint()->set_init_from_job_uid(source->job.uid());
  spec->mutable_checkpoint()->set_init_from_step(step);
  return errors;
}

std::vector<FieldError> JobManager::CheckSpec(const v1::JobSpec& spec, Role role) const {
  std::vector<FieldError> errors = ValidateJobSpec(spec);
  // The coordinator's own: it sets them from SubmitJobRequest.origin.weights_from.
  if (spec.checkpoint().has_init_from_job_uid()) {
    errors.push_back({"checkpoint.init_from_job_uid",
                      "set by the coordinator from --from (SubmitJobRequest.origin.weights_from); "
                      "a submitted spec may not set it"});
  }
  if (spec.checkpoint().has_init_from_step()) {
    errors.push_back({"checkpoint.init_from_step",
                      "set by the coordinator from --from (SubmitJobRequest.origin.weights_from); "
                      "a submitted spec may not set it"});
  }
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

absl::StatusOr<std::string> JobManager::Submit(const v1::JobSpec& submitted,
                                               const std::string& owner,
                                               std::vector<FieldError>* field_errors, Role role,
                                               const SubmitDetails& details) {
  const auto invalid = [field_errors](std::vector<FieldError> errors) {
    absl::Status status = absl::InvalidArgumentError(FormatFieldErrors(errors));
    if (field_errors != nullptr) *field_errors = std::move(errors);
    return status;
  };
  std::vector<FieldError> errors = CheckSpec(submitted, role);
  for (FieldError& error : ValidateLabels(details.labels)) errors.push_back(std::move(error));
  if (!errors.empty()) return invalid(std::move(errors));
  std::lock_guard<std::mutex> lock(mutex_);
  if (shutting_down_) return absl::UnavailableError("coordinator shutting down");
  v1::JobSpec spec = submitted;
  v1::JobOrigin origin;
  errors = ResolveOriginLocked(details, &spec, &origin);
  if (!errors.empty()) return invalid(std::move(errors));
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
    record.job.set_reason(kSubmittedReason);
    record.job.set_owner(owner);
    record.job.mutable_labels()->insert(details.labels.begin(), details.labels.end());
    if (origin.ByteSizeLong() > 0) *record.job.mutable_origin() = origin;
    status = store_.InsertJob(record.job);
    if (status.ok()) {
      stored = &jobs_.emplace(*id, std::move(record)).first->second;
      TransitionLocked(*stored, v1::PENDING, kSubmittedReason, owner);
    }
  }
  if (absl::Status commit = store_.EndGroup(); status.ok()) status = commit;
  deferring_publish_ = false;
  unpublished_.clear();
  held_notifications_.clear();  // a new job has no subscribers yet
  snapshots_.clear();
  step_undos_.clear();
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
  if (wake_scheduler_) {
    wake_scheduler_();  // SetSchedulingWaker: the pass runs on the ticker's thread
  } else {
    RunGroupedLocked([this] { ScheduleLocked(); });
  }
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
