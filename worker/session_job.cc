#include "worker/session_job.h"

#include <chrono>
#include <exception>
#include <filesystem>
#include <iterator>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
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

bool IsInside(const std::filesystem::path& path, const std::filesystem::path& root) {
  auto path_it = path.begin();
  for (auto root_it = root.begin(); root_it != root.end(); ++root_it, ++path_it) {
    // A trailing separator leaves an empty last element in the root.
    if (root_it->empty() && std::next(root_it) == root.end()) return true;
    if (path_it == path.end() || *path_it != *root_it) return false;
  }
  return true;
}

absl::Status CheckOnePath(const std::string& field, const std::string& value,
                          const std::vector<std::string>& roots) {
  if (value.empty() || roots.empty()) return absl::OkStatus();
  std::error_code error;
  const std::filesystem::path resolved = std::filesystem::weakly_canonical(value, error);
  if (error) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": cannot resolve \"", value, "\": ", error.message()));
  }
  for (const std::string& root : roots) {
    const std::filesystem::path resolved_root = std::filesystem::weakly_canonical(root, error);
    if (!error && IsInside(resolved, resolved_root)) return absl::OkStatus();
  }
  return absl::PermissionDeniedError(absl::StrCat(
      field, ": \"", value, "\" is outside the worker's allowed roots (--allowed-root)"));
}

}  // namespace

absl::Status CheckPathsAllowed(const v1::JobSpec& spec, const std::vector<std::string>& roots) {
  absl::Status data = CheckOnePath("data.path", spec.data().path(), roots);
  if (!data.ok()) return data;
  return CheckOnePath("checkpoint.init_from", spec.checkpoint().init_from(), roots);
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
  }
  cancelled_.store(true);
}

void JobRun::RequestProfile(const v1::ProfileRequest& request) {
  std::lock_guard<std::mutex> lock(profile_mutex_);
  profile_request_ = request;
}

void JobRun::Join() {
  if (thread_.joinable()) thread_.join();
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
  }
  outbox_->PushFinished(std::move(finished));
  finished_.store(true);
  outbox_->Wake();
}

FinishedAttempt JobRun::Train() {
  FinishedAttempt finished;
  v1::AttemptResult& result = finished.result;
  result.set_job_id(job_id());
  result.set_attempt(attempt());
  result.set_rank(rank());

  std::atomic<int64_t> last_step{0};
  std::atomic<double> last_loss{0.0};
  absl::StatusOr<TrainResult> trained = absl::UnknownError("the trainer did not run");
  absl::Status paths = CheckPathsAllowed(assignment_.spec(), options_.allowed_roots);
  // The job id names the checkpoint directory under the root, so it must stay one component.
  if (paths.ok() && (job_id().empty() || job_id() == "." || job_id() == ".." ||
                     job_id().find('/') != std::string::npos)) {
    paths = absl::InvalidArgumentError(
        absl::StrCat("job id \"", job_id(), "\" cannot name a checkpoint directory"));
  }
  if (!paths.ok()) {
    trained = paths;
  } else {
    RankContext context;
    context.job_id = job_id();
    context.attempt = attempt();
    context.rank = rank();
    context.world_size = assignment_.world_size();
    context.checkpoint_dir = (std::filesystem::path(options_.checkpoint_root) / job_id()).string();
    context.allowed_roots = options_.allowed_roots;
    if (!context.allowed_roots.empty()) {
      // The operator chose the checkpoint root, so the job may always write there.
      context.allowed_roots.push_back(options_.checkpoint_root);
    }
    context.bind_address = options_.bind_address;
    context.device = options_.device;
    CoordinatorKeyValueStore store(channel_, job_id(), attempt());
    context.store = &store;

    TrainerHooks hooks;
    hooks.cancelled = &cancelled_;
    hooks.on_step = [&](const v1::StepReport& report) {
      v1::WorkerMessage message;
      v1::StepReport* step = message.mutable_step();
      *step = report;
      step->set_job_id(job_id());
      step->set_attempt(attempt());
      step->set_rank(rank());
      if (step->unix_millis() == 0) step->set_unix_millis(NowUnixMillis());
      last_step.store(step->step());
      last_loss.store(step->loss());
      outbox_->PushTelemetry(std::move(message));
    };
    hooks.on_profile = [&](const v1::ProfileReport& report) {
      v1::WorkerMessage message;
      v1::ProfileReport* profile = message.mutable_profile();
      *profile = report;
      profile->set_job_id(job_id());
      profile->set_attempt(attempt());
      profile->set_rank(rank());
      outbox_->PushTelemetry(std::move(message));
    };
    hooks.poll_profile_request = [&]() -> std::optional<v1::ProfileRequest> {
      std::lock_guard<std::mutex> lock(profile_mutex_);
      std::optional<v1::ProfileRequest> request = std::move(profile_request_);
      profile_request_.reset();
      return request;
    };
    hooks.on_log = [&](const std::string& level, const std::string& text) {
      spdlog::debug("job {} rank {}: {}", job_id(), rank(), text);
      Log(level, text);
    };

    std::error_code error;
    std::filesystem::create_directories(context.checkpoint_dir, error);
    if (error) {
      trained = absl::InternalError(absl::StrCat("cannot create the checkpoint directory ",
                                                 context.checkpoint_dir, ": ", error.message()));
    } else {
      // A crash inside the engine fails this attempt only; the worker goes on.
      try {
        trained = RunTrainer(assignment_.spec(), context, hooks);
      } catch (const std::exception& exception) {
        trained = absl::InternalError(absl::StrCat("the trainer threw: ", exception.what()));
      } catch (...) {
        trained = absl::InternalError("the trainer threw an unknown exception");
      }
    }
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
  }
  return finished;
}

}  // namespace fsdpd
