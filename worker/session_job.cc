#include "worker/session_job.h"

#include <chrono>
#include <exception>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/path_component.h"
#include "base/status_macros.h"
#include "spdlog/spdlog.h"
#include "worker/comm/coordinator_key_value_store.h"
#include "worker/trainer.h"

namespace fsdpd {
namespace {

int64_t NowUnixMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

bool IsPermanentFailure(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:     // a shape or setting the worker cannot run
    case absl::StatusCode::kNotFound:            // a missing data or init file
    case absl::StatusCode::kPermissionDenied:    // a path outside --allowed-root, or unreadable
    case absl::StatusCode::kFailedPrecondition:  // e.g. a checkpoint of another job or shape
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kUnimplemented:
      return true;
    default:  // crashes, lost peers, collective timeouts, out of memory: worth a retry
      return false;
  }
}

JobRun::JobRun(v1::Assignment assignment, JobRunOptions options,
               std::shared_ptr<grpc::Channel> channel, Outbox* outbox)
    : assignment_(std::move(assignment)),
      options_(std::move(options)),
      channel_(std::move(channel)),
      outbox_(outbox) {}

JobRun::~JobRun() {
  Cancel("the worker is shutting down");
  Join();
}

void JobRun::Start() {
  thread_ = std::thread([this] { Body(); });
}

void JobRun::Cancel(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(cancel_reason_mutex_);
    if (cancel_reason_.empty()) cancel_reason_ = reason;
    if (!cancelled_at_.has_value()) cancelled_at_ = std::chrono::steady_clock::now();
  }
  cancelled_.store(true);
  // A rank whose peer died waits inside a collective and would see the flag only after the
  // collective timeout: abort it now (ncclCommAbort on NCCL).
  std::lock_guard<std::mutex> lock(abort_mutex_);
  if (abort_) abort_();
}

void JobRun::RequestProfile(const v1::ProfileRequest& request) {
  std::lock_guard<std::mutex> lock(profile_mutex_);
  profile_request_ = request;
}

void JobRun::Join() {
  if (thread_.joinable()) thread_.join();
}

std::optional<std::chrono::steady_clock::time_point> JobRun::CancelledAt() {
  std::lock_guard<std::mutex> lock(cancel_reason_mutex_);
  return cancelled_at_;
}

std::string JobRun::CancelReason() {
  std::lock_guard<std::mutex> lock(cancel_reason_mutex_);
  return cancel_reason_;
}

std::string JobRun::LastActivity() {
  std::lock_guard<std::mutex> lock(activity_mutex_);
  return last_activity_;
}

void JobRun::Log(const std::string& level, const std::string& text) {
  v1::WorkerMessage message;
  v1::LogLine* line = message.mutable_log();
  line->set_job_id(job_id());
  line->set_attempt(attempt());
  line->set_rank(rank());
  line->set_unix_millis(NowUnixMillis());
  line->set_level(level);
  line->set_text(text);
  line->set_sequence(++log_sequence_);
  outbox_->PushTelemetry(std::move(message));
}

void JobRun::Body() {
  spdlog::info("job {} attempt {}: starting rank {} of {}", job_id(), attempt(), rank(),
               assignment_.world_size());
  FinishedAttempt finished = Train();
  const v1::AttemptResult& result = finished.result;
  if (result.ok()) {
    spdlog::info("job {} attempt {} rank {}: finished at step {} with loss {:.4f}", job_id(),
                 attempt(), rank(), result.final_step(), result.final_loss());
  } else if (result.cancelled()) {
    spdlog::info("job {} attempt {} rank {}: cancelled at step {}", job_id(), attempt(), rank(),
                 result.final_step());
  } else {
    spdlog::error("job {} attempt {} rank {}: failed: {}", job_id(), attempt(), rank(),
                  result.error());
    Log("error", result.error());
    if (options_.after_failure) options_.after_failure();
  }
  outbox_->PushFinished(std::move(finished));
  finished_.store(true);
  outbox_->Wake();
}

// The job's unique id names the checkpoint directory under the root (display ids restart at
// job-000001 in every new state folder), so it must stay one component (base/path_component.h).
// The trainer resolves the spec's paths and creates that directory, confined to the allowed roots
// (worker/data/path_policy.h).
absl::StatusOr<RankContext> JobRun::MakeRankContext() const {
  FSDPD_RETURN_IF_ERROR(CheckPathComponent("job uid", job_uid()));
  RankContext context;
  context.job_id = job_id();
  context.job_uid = job_uid();
  context.attempt = attempt();
  context.rank = rank();
  context.world_size = assignment_.world_size();
  context.checkpoint_dir = (std::filesystem::path(options_.checkpoint_root) / job_uid()).string();
  context.allowed_roots = options_.allowed_roots;
  if (!context.allowed_roots.empty()) {
    // The operator chose the checkpoint root, so the job may always write there.
    context.allowed_roots.push_back(options_.checkpoint_root);
  }
  context.bind_address = options_.bind_address;
  context.device = options_.device;
  return context;
}

// Steps, profiles, committed checkpoints and log lines go to the outbox, stamped with this
// run's identity.
TrainerHooks JobRun::MakeHooks(std::atomic<int64_t>& last_step, std::atomic<double>& last_loss) {
  TrainerHooks hooks;
  hooks.cancelled = &cancelled_;
  hooks.set_abort = [this](std::function<void()> abort) {
    std::lock_guard<std::mutex> lock(abort_mutex_);
    abort_ = std::move(abort);
    if (abort_ && cancelled_.load()) abort_();  // cancelled while the run was starting
  };
  hooks.on_step = [this, &last_step, &last_loss](const v1::StepReport& report) {
    v1::WorkerMessage message;
    v1::StepReport* step = message.mutable_step();
    *step = report;
    step->set_job_id(job_id());
    step->set_attempt(attempt());
    step->set_rank(rank());
    step->set_job_uid(job_uid());
    if (step->unix_millis() == 0) step->set_unix_millis(NowUnixMillis());
    last_step.store(step->step());
    last_loss.store(step->loss());
    outbox_->PushTelemetry(std::move(message));
  };
  hooks.on_profile = [this](const v1::ProfileReport& report) {
    v1::WorkerMessage message;
    v1::ProfileReport* profile = message.mutable_profile();
    *profile = report;
    profile->set_job_id(job_id());
    profile->set_attempt(attempt());
    profile->set_rank(rank());
    outbox_->PushTelemetry(std::move(message));
  };
  hooks.poll_profile_request = [this]() -> std::optional<v1::ProfileRequest> {
    std::lock_guard<std::mutex> lock(profile_mutex_);
    std::optional<v1::ProfileRequest> request = std::move(profile_request_);
    profile_request_.reset();
    return request;
  };
  hooks.on_checkpoint = [this](const v1::CheckpointCommitted& committed) {
    v1::WorkerMessage message;
    v1::CheckpointCommitted* checkpoint = message.mutable_checkpoint();
    *checkpoint = committed;
    checkpoint->set_job_id(job_id());
    checkpoint->set_job_uid(job_uid());
    checkpoint->set_attempt(attempt());
    outbox_->PushTelemetry(std::move(message));
  };
  hooks.on_log = [this](const std::string& level, const std::string& text) {
    spdlog::debug("job {} rank {}: {}", job_id(), rank(), text);
    {
      std::lock_guard<std::mutex> lock(activity_mutex_);
      last_activity_ = text;
    }
    Log(level, text);
  };
  return hooks;
}

namespace {

// A crash inside the engine fails this attempt only; the worker goes on. The spec is the one the
// coordinator validated at submission and stored (ValidateJobSpec); the worker trusts it, as it
// trusts the coordinator that sends it (docs/security.md), and does not validate it again.
absl::StatusOr<TrainResult> RunTrainerGuarded(const v1::JobSpec& spec, const RankContext& context,
                                              const TrainerHooks& hooks) {
  try {
    return RunTrainer(spec, context, hooks);
  } catch (const std::exception& exception) {
    return absl::InternalError(absl::StrCat("the trainer threw: ", exception.what()));
  } catch (...) {
    return absl::InternalError("the trainer threw an unknown exception");
  }
}

}  // namespace

FinishedAttempt JobRun::Train() {
  FinishedAttempt finished;
  v1::AttemptResult& result = finished.result;
  result.set_job_id(job_id());
  result.set_attempt(attempt());
  result.set_rank(rank());
  result.set_job_uid(job_uid());

  std::atomic<int64_t> last_step{0};
  std::atomic<double> last_loss{0.0};
  absl::StatusOr<TrainResult> trained = absl::UnknownError("the trainer did not run");
  absl::StatusOr<RankContext> context = MakeRankContext();
  if (!context.ok()) {
    trained = context.status();
  } else {
    CoordinatorKeyValueStore store(channel_, job_id(), attempt());
    context->store = &store;
    trained = RunTrainerGuarded(assignment_.spec(), *context, MakeHooks(last_step, last_loss));
  }

  if (trained.ok()) {
    result.set_ok(true);
    result.set_final_step(trained->final_step);
    result.set_final_loss(trained->final_loss);
    if (rank() == 0) finished.artifact_path = trained->exported_model_path;
    return finished;
  }
  result.set_final_step(last_step.load());
  result.set_final_loss(last_loss.load());
  if (trained.status().code() == absl::StatusCode::kCancelled || cancelled_.load()) {
    result.set_cancelled(true);
    std::lock_guard<std::mutex> lock(cancel_reason_mutex_);
    result.set_error(cancel_reason_.empty() ? std::string(trained.status().message())
                                            : cancel_reason_);
  } else {
    result.set_error(std::string(trained.status().message()));
    if (result.error().empty()) result.set_error(trained.status().ToString());
    result.set_permanent(IsPermanentFailure(trained.status()));
  }
  return finished;
}

}  // namespace fsdpd
