#include "worker/session.h"

#include <algorithm>
#include <random>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/pem_file.h"
#include "base/status_macros.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "proto/bearer_token.h"
#include "spdlog/spdlog.h"

namespace fsdpd {
namespace {

using Clock = std::chrono::steady_clock;
using Stream = grpc::ClientReaderWriter<v1::WorkerMessage, v1::CoordinatorMessage>;

constexpr std::chrono::seconds kRegisterTimeout(5);
// A session that lived this long was healthy, so the next reconnect starts from scratch.
constexpr std::chrono::seconds kHealthySession(10);

std::shared_ptr<grpc::Channel> MakeChannel(const WorkerConfig& config) {
  grpc::ChannelArguments arguments;
  // gRPC's own reconnect backoff grows to two minutes; a restarted coordinator should see its
  // workers back within seconds.
  arguments.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 250);
  arguments.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  arguments.SetMaxSendMessageSize(-1);
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (!config.tls_ca_pem.empty()) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = config.tls_ca_pem;
    ssl.pem_cert_chain = config.tls_cert_pem;
    ssl.pem_private_key = config.tls_key_pem;
    credentials = grpc::SslCredentials(ssl);
  }
  // The worker token goes with every call on this channel, the rendezvous calls included.
  return grpc::experimental::CreateCustomChannelWithInterceptors(
      config.coordinator_address, credentials, arguments, BearerTokenInterceptors(config.token));
}

}  // namespace

absl::Status LoadWorkerTls(const std::string& ca_path, const std::string& cert_path,
                           const std::string& key_path, WorkerConfig* config) {
  if (cert_path.empty() != key_path.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key must be given together");
  }
  if (!cert_path.empty() && ca_path.empty()) {
    return absl::InvalidArgumentError(
        "--tls-cert needs --tls-ca: a client certificate is only sent over TLS");
  }
  if (!ca_path.empty()) {
    FSDPD_ASSIGN_OR_RETURN(config->tls_ca_pem, ReadPemFile("--tls-ca", ca_path));
  }
  if (!cert_path.empty()) {
    FSDPD_ASSIGN_OR_RETURN(config->tls_cert_pem, ReadPemFile("--tls-cert", cert_path));
    FSDPD_ASSIGN_OR_RETURN(config->tls_key_pem, ReadPemFile("--tls-key", key_path));
  }
  return absl::OkStatus();
}

absl::Status ValidateWorkerConfig(const WorkerConfig& config) {
  if (config.coordinator_address.empty()) {
    return absl::InvalidArgumentError("--coordinator: must not be empty");
  }
  if (config.checkpoint_root.empty()) {
    return absl::InvalidArgumentError("--checkpoint-root: must not be empty");
  }
  if (config.address.empty()) return absl::InvalidArgumentError("--address: must not be empty");
  if (config.heartbeat_interval.count() <= 0) {
    return absl::InvalidArgumentError("--heartbeat-interval: must be positive");
  }
  if (config.cancel_grace.count() <= 0) {
    return absl::InvalidArgumentError("--cancel-grace: must be positive");
  }
  for (const std::string& root : config.allowed_roots) {
    if (root.empty()) return absl::InvalidArgumentError("--allowed-root: must not be empty");
  }
  return absl::OkStatus();
}

WorkerSession::WorkerSession(WorkerConfig config, DeviceInfo device)
    : config_(std::move(config)),
      device_(std::move(device)),
      channel_(MakeChannel(config_)),
      stub_(v1::WorkerService::NewStub(channel_)),
      outbox_(config_.telemetry_buffer_capacity),
      heartbeat_interval_(config_.heartbeat_interval),
      oom_evidence_(OomEvidenceFile(config_.checkpoint_root, config_.hostname, config_.device)),
      previous_oom_kill_(oom_evidence_.PreviousKill()) {
  if (previous_oom_kill_.has_value()) {
    spdlog::warn(
        "the previous worker process was killed by the kernel's OOM killer while it ran "
        "job {} attempt {} rank {} (cgroup {}: oom_kill {} → {}); reporting it",
        previous_oom_kill_->attempt.job_id, previous_oom_kill_->attempt.attempt,
        previous_oom_kill_->attempt.rank, previous_oom_kill_->cgroup,
        previous_oom_kill_->oom_kills_before, previous_oom_kill_->oom_kills_after);
  }
}

WorkerSession::~WorkerSession() {
  Shutdown();
  std::lock_guard<std::mutex> lock(state_mutex_);
  job_.reset();
  export_.reset();
}

absl::Status WorkerSession::Register() {
  v1::RegisterRequest request;
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    request.set_worker_id(worker_id_);
    if (job_ && !job_->Finished()) {
      request.set_running_job_id(job_->job_id());
      request.set_running_attempt(job_->attempt());
      request.set_running_rank(job_->rank());
    }
  }
  // An attempt that ended while the coordinator was away still counts as ours until its
  // result is delivered, so the coordinator waits for it instead of declaring the rank lost.
  if (request.running_job_id().empty()) {
    if (std::optional<v1::AttemptResult> unsent = outbox_.OldestUnsentResult()) {
      request.set_running_job_id(unsent->job_id());
      request.set_running_attempt(unsent->attempt());
      request.set_running_rank(unsent->rank());
    }
  }
  request.set_hostname(config_.hostname);
  request.set_device_kind(device_.kind);
  request.set_gpu_index(device_.gpu_index);
  request.set_gpu_name(device_.gpu_name);
  request.set_gpu_uuid(device_.gpu_uuid);
  request.set_memory_bytes(device_.memory_bytes);
  request.set_gpu_compute_capability(device_.compute_capability);
  request.set_address(config_.address);
  *request.mutable_health() = Health();
  if (previous_oom_kill_.has_value()) {
    v1::OomKill* oom = request.mutable_previous_oom_kill();
    oom->set_job_id(previous_oom_kill_->attempt.job_id);
    oom->set_job_uid(previous_oom_kill_->attempt.job_uid);
    oom->set_attempt(previous_oom_kill_->attempt.attempt);
    oom->set_rank(previous_oom_kill_->attempt.rank);
    oom->set_cgroup(previous_oom_kill_->cgroup);
    oom->set_oom_kills_before(previous_oom_kill_->oom_kills_before);
    oom->set_oom_kills_after(previous_oom_kill_->oom_kills_after);
  }

  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kRegisterTimeout);
  // Waits for the channel to connect (its own backoff is short) rather than failing at once
  // while a restarted coordinator is coming up.
  context.set_wait_for_ready(true);
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    if (shutting_down_.load()) return absl::CancelledError("the worker is shutting down");
    register_context_ = &context;
  }
  v1::RegisterResponse response;
  grpc::Status status = stub_->Register(&context, request, &response);
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    register_context_ = nullptr;
  }
  if (!status.ok()) {
    const std::string why = absl::StrCat("register with the coordinator at ",
                                         config_.coordinator_address, ": ", status.error_message());
    // The coordinator refusing what we send will not change by retrying.
    if (status.error_code() == grpc::StatusCode::INVALID_ARGUMENT) {
      return absl::InvalidArgumentError(why);
    }
    // Nor will a missing or refused credential, or a worker id bound to another credential.
    if (status.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
        status.error_code() == grpc::StatusCode::PERMISSION_DENIED) {
      return absl::Status(static_cast<absl::StatusCode>(status.error_code()), why);
    }
    return absl::UnavailableError(why);
  }
  std::lock_guard<std::mutex> lock(state_mutex_);
  previous_oom_kill_.reset();  // reported once
  if (!worker_id_.empty() && worker_id_ != response.worker_id()) {
    spdlog::warn("the coordinator gave a new worker id {} (was {})", response.worker_id(),
                 worker_id_);
  }
  worker_id_ = response.worker_id();
  heartbeat_interval_ = config_.heartbeat_interval;
  // Beat at least as often as the coordinator asks, so it never takes us for lost.
  if (response.heartbeat_interval_millis() > 0) {
    heartbeat_interval_ = std::min(heartbeat_interval_,
                                   std::chrono::milliseconds(response.heartbeat_interval_millis()));
  }
  spdlog::info("registered with the coordinator at {} as worker {} ({}, {} bytes)",
               config_.coordinator_address, worker_id_, device_.kind, device_.memory_bytes);
  return absl::OkStatus();
}

absl::Status WorkerSession::Run() {
  CheckCheckpointRoot();
  watch_stop_.store(false);
  std::thread watchdog([this] { WatchLoop(); });
  std::chrono::milliseconds backoff = config_.reconnect_initial_backoff;
  absl::Status fatal;
  while (!shutting_down_.load()) {
    absl::Status registered = Register();
    if (absl::IsInvalidArgument(registered) || absl::IsUnauthenticated(registered) ||
        absl::IsPermissionDenied(registered)) {
      fatal = registered;
      Shutdown();
      break;
    }
    if (shutting_down_.load()) break;
    if (!registered.ok()) {
      spdlog::warn("{}; retrying", std::string(registered.message()));
      SleepBeforeReconnect(backoff);
      backoff = std::min(backoff * 2, config_.reconnect_max_backoff);
      continue;
    }
    const Clock::time_point opened = Clock::now();
    RunStream();
    if (shutting_down_.load()) break;
    if (Clock::now() - opened > kHealthySession) backoff = config_.reconnect_initial_backoff;
    spdlog::warn("lost the session with the coordinator at {}; reconnecting",
                 config_.coordinator_address);
    SleepBeforeReconnect(backoff);
    backoff = std::min(backoff * 2, config_.reconnect_max_backoff);
  }
  std::unique_ptr<JobRun> job;
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    job = std::move(job_);
  }
  EndJob(std::move(job));
  {
    std::lock_guard<std::mutex> lock(watch_mutex_);
    watch_stop_.store(true);
  }
  watch_changed_.notify_all();
  watchdog.join();
  if (!outbox_.Empty()) {
    spdlog::warn("shutting down with reports the coordinator has not received");
  }
  if (wedged_.load()) return absl::AbortedError(Health().unhealthy());
  oom_evidence_.Clear();  // a clean end: nothing for the next process to report
  return fatal;
}

void WorkerSession::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    if (shutting_down_.exchange(true)) return;
    shutdown_deadline_ = Clock::now() + config_.shutdown_grace;
    if (job_) job_->Cancel("the worker is shutting down");
    if (register_context_ != nullptr) register_context_->TryCancel();
  }
  { std::lock_guard<std::mutex> lock(sleep_mutex_); }
  sleep_changed_.notify_all();
  outbox_.Wake();
}

void WorkerSession::SleepBeforeReconnect(std::chrono::milliseconds backoff) {
  // Jitter keeps a fleet of workers from reconnecting in lockstep.
  static thread_local std::mt19937 random(std::random_device{}());
  std::uniform_real_distribution<double> fraction(0.5, 1.0);
  const auto pause =
      std::chrono::milliseconds(static_cast<int64_t>(backoff.count() * fraction(random)));
  std::unique_lock<std::mutex> lock(sleep_mutex_);
  sleep_changed_.wait_for(lock, pause, [&] { return shutting_down_.load(); });
}

void WorkerSession::RunStream() {
  // Whatever the last coordinator did not confirm as stored goes first.
  outbox_.RequeueUnconfirmed();
  heartbeats_sent_.store(0);
  heartbeats_acked_.store(0);
  unhealthy_heartbeat_.store(0);
  // A coordinator (perhaps a new one) says on its first ack whether it paces.
  paced_interval_millis_.store(0);
  grpc::ClientContext context;
  std::unique_ptr<Stream> stream = stub_->Session(&context);
  std::atomic<bool> broken{false};
  std::thread writer([&] {
    WriteLoop(stream.get(), &broken);
    // Unblocks the reader below, whether the stream broke or we are closing it.
    context.TryCancel();
  });
  v1::CoordinatorMessage message;
  while (stream->Read(&message)) HandleMessage(message);
  broken.store(true);
  outbox_.Wake();
  writer.join();
  grpc::Status status = stream->Finish();
  // A write that failed cancels the call itself, which hides the cause behind CANCELLED.
  if (!status.ok() && !shutting_down_.load() &&
      status.error_code() != grpc::StatusCode::CANCELLED) {
    spdlog::warn("session stream ended: {}", status.error_message());
  }
}

void WorkerSession::HandleMessage(const v1::CoordinatorMessage& message) {
  for (const v1::ReportsStored& stored : message.reports_stored()) outbox_.ConfirmStored(stored);
  switch (message.payload_case()) {
    case v1::CoordinatorMessage::kAssignment:
      HandleAssignment(message.assignment());
      break;
    case v1::CoordinatorMessage::kCancellation:
      HandleCancellation(message.cancellation());
      break;
    case v1::CoordinatorMessage::kProfileRequest:
      HandleProfileRequest(message.profile_request());
      break;
    case v1::CoordinatorMessage::kExportRequest:
      HandleExportRequest(message.export_request());
      break;
    case v1::CoordinatorMessage::kHeartbeatAck:
      if (const int64_t paced = message.paced_interval_millis();
          paced_interval_millis_.exchange(paced) != paced) {
        if (paced > 0) {
          spdlog::info(
              "the coordinator paces step reports: they go inside heartbeats, one every {} ms",
              paced);
        } else {
          spdlog::info("the coordinator no longer paces step reports");
        }
      }
      for (int64_t acked = heartbeats_acked_.load();
           message.heartbeat_ack().sequence() > acked &&
           !heartbeats_acked_.compare_exchange_weak(acked, message.heartbeat_ack().sequence());) {
      }
      // A wedged session waits for this acknowledgement to close (ReadyToClose).
      if (wedged_.load()) outbox_.Wake();
      break;
    case v1::CoordinatorMessage::PAYLOAD_NOT_SET:
      break;
  }
}

void WorkerSession::HandleAssignment(const v1::Assignment& assignment) {
  auto refuse = [&](const std::string& why) {
    spdlog::warn("refusing job {} attempt {}: {}", assignment.job_id(), assignment.attempt(), why);
    FinishedAttempt refused;
    refused.result.set_job_id(assignment.job_id());
    refused.result.set_attempt(assignment.attempt());
    refused.result.set_rank(assignment.rank());
    refused.result.set_job_uid(assignment.job_uid());
    refused.result.set_error(why);
    outbox_.PushFinished(std::move(refused));
  };

  // A run hands its result to the outbox just before it marks itself finished, and the
  // coordinator frees this worker as soon as that result arrives, so the next assignment can
  // come while the run is still ending: give it a moment instead of refusing the assignment.
  const auto ending_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (std::chrono::steady_clock::now() < ending_deadline) {
    {
      std::lock_guard<std::mutex> lock(state_mutex_);
      if (!job_ || job_->Finished() ||
          (job_->job_uid() == assignment.job_uid() && job_->attempt() == assignment.attempt())) {
        break;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }

  std::unique_ptr<JobRun> previous;
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    if (shutting_down_.load()) {
      refuse("the worker is shutting down");
      return;
    }
    if (job_ && !job_->Finished()) {
      if (job_->job_uid() == assignment.job_uid() && job_->attempt() == assignment.attempt() &&
          job_->rank() == assignment.rank()) {
        return;  // re-sent after a reconnect: already running it
      }
      refuse(absl::StrCat("the worker is busy with job ", job_->job_id(), " attempt ",
                          job_->attempt()));
      return;
    }
    if (assignment.job_uid().empty()) {
      refuse("the assignment carries no job uid, so its checkpoints could not be told apart");
      return;
    }
    if (started_job_uid_ == assignment.job_uid() && started_attempt_ == assignment.attempt()) {
      // Re-sent after a reconnect: this very attempt already ran here and its result is queued
      // in the outbox (results are never dropped), so the coordinator hears of it.
      spdlog::info("job {} ({}) attempt {}: already ran here; its result is on the way",
                   assignment.job_id(), assignment.job_uid(), assignment.attempt());
      return;
    }
    if (assignment.world_size() <= 0 || assignment.rank() < 0 ||
        assignment.rank() >= assignment.world_size()) {
      refuse(absl::StrCat("invalid assignment: rank ", assignment.rank(), " of world size ",
                          assignment.world_size()));
      return;
    }
    previous = std::move(job_);
    JobRunOptions options;
    options.checkpoint_root = config_.checkpoint_root;
    options.allowed_roots = config_.allowed_roots;
    options.bind_address = config_.address;
    options.device = config_.device;
    options.after_failure = [this] { CheckCheckpointRoot(); };
    job_ = std::make_unique<JobRun>(assignment, std::move(options), channel_, &outbox_);
    started_job_uid_ = assignment.job_uid();
    started_attempt_ = assignment.attempt();
    oom_evidence_.Started(
        {assignment.job_id(), assignment.job_uid(), assignment.attempt(), assignment.rank()});
    job_->Start();
    // The explicit answer: the coordinator waits for it before the SCHEDULED deadline.
    v1::WorkerMessage accepted;
    accepted.mutable_accepted()->set_job_id(assignment.job_id());
    accepted.mutable_accepted()->set_job_uid(assignment.job_uid());
    accepted.mutable_accepted()->set_attempt(assignment.attempt());
    accepted.mutable_accepted()->set_rank(assignment.rank());
    outbox_.PushTelemetry(std::move(accepted));
  }
  // The previous run has already finished; joining it is immediate.
  if (previous) previous->Join();
}

void WorkerSession::HandleCancellation(const v1::Cancellation& cancellation) {
  std::lock_guard<std::mutex> lock(state_mutex_);
  if (!job_ || job_->Finished() || job_->job_id() != cancellation.job_id() ||
      (cancellation.attempt() != 0 && cancellation.attempt() != job_->attempt())) {
    spdlog::info("cancellation of job {} attempt {}: not running here", cancellation.job_id(),
                 cancellation.attempt());
    return;
  }
  spdlog::info("cancelling job {} attempt {}: {}", cancellation.job_id(), job_->attempt(),
               cancellation.reason());
  job_->Cancel(cancellation.reason().empty() ? "cancelled by the coordinator"
                                             : cancellation.reason());
}

void WorkerSession::HandleProfileRequest(const v1::ProfileRequest& request) {
  std::lock_guard<std::mutex> lock(state_mutex_);
  if (!job_ || job_->Finished() || job_->job_id() != request.job_id() ||
      (request.attempt() != 0 && request.attempt() != job_->attempt())) {
    spdlog::info("profiling request for job {}: not running here", request.job_id());
    return;
  }
  job_->RequestProfile(request);
}

void WorkerSession::HandleExportRequest(const v1::ExportRequest& request) {
  std::unique_ptr<ExportRun> previous;
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    if (export_ && !export_->Finished()) {
      const v1::ExportRequest& running = export_->request();
      if (running.job_uid() == request.job_uid() && running.step() == request.step()) return;
      outbox_.PushExport(
          RefusedExport(request, absl::StrCat("the worker is busy exporting step ", running.step(),
                                              " of job ", running.job_id())));
      return;
    }
    previous = std::move(export_);
    export_ = std::make_unique<ExportRun>(request, config_.checkpoint_root, config_.allowed_roots,
                                          &outbox_);
    export_->Start();
  }
  // The previous export has already finished; joining it is immediate.
  previous.reset();
}

}  // namespace fsdpd
