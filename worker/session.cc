#include "worker/session.h"

#include <algorithm>
#include <fstream>
#include <random>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "spdlog/spdlog.h"

namespace fsdpd {
namespace {

using Clock = std::chrono::steady_clock;
using Stream = grpc::ClientReaderWriter<v1::WorkerMessage, v1::CoordinatorMessage>;

constexpr size_t kArtifactChunkBytes = 1 << 20;
constexpr std::chrono::seconds kRegisterTimeout(5);
// A session that lived this long was healthy, so the next reconnect starts from scratch.
constexpr std::chrono::seconds kHealthySession(10);

int64_t NowUnixMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address) {
  grpc::ChannelArguments arguments;
  // gRPC's own reconnect backoff grows to two minutes; a restarted coordinator should see its
  // workers back within seconds.
  arguments.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 250);
  arguments.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 250);
  arguments.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  arguments.SetMaxSendMessageSize(-1);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), arguments);
}

}  // namespace

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
  for (const std::string& root : config.allowed_roots) {
    if (root.empty()) return absl::InvalidArgumentError("--allowed-root: must not be empty");
  }
  return absl::OkStatus();
}

WorkerSession::WorkerSession(WorkerConfig config, DeviceInfo device)
    : config_(std::move(config)),
      device_(std::move(device)),
      channel_(MakeChannel(config_.coordinator_address)),
      stub_(v1::WorkerService::NewStub(channel_)),
      outbox_(config_.telemetry_buffer_capacity),
      heartbeat_interval_(config_.heartbeat_interval) {}

WorkerSession::~WorkerSession() {
  Shutdown();
  std::lock_guard<std::mutex> lock(state_mutex_);
  job_.reset();
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
  request.set_address(config_.address);

  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kRegisterTimeout);
  // Waits for the channel to connect (its own backoff is short) rather than failing at once
  // while a restarted coordinator is coming up.
  context.set_wait_for_ready(true);
  v1::RegisterResponse response;
  grpc::Status status = stub_->Register(&context, request, &response);
  if (!status.ok()) {
    const std::string why = absl::StrCat("register with the coordinator at ",
                                         config_.coordinator_address, ": ", status.error_message());
    // The coordinator refusing what we send will not change by retrying.
    if (status.error_code() == grpc::StatusCode::INVALID_ARGUMENT) {
      return absl::InvalidArgumentError(why);
    }
    return absl::UnavailableError(why);
  }
  std::lock_guard<std::mutex> lock(state_mutex_);
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
  std::chrono::milliseconds backoff = config_.reconnect_initial_backoff;
  absl::Status fatal;
  while (!shutting_down_.load()) {
    absl::Status registered = Register();
    if (absl::IsInvalidArgument(registered)) {
      fatal = registered;
      Shutdown();
      break;
    }
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
  if (job) {
    job->Cancel("the worker is shutting down");
    job->Join();
  }
  if (!outbox_.Empty()) {
    spdlog::warn("shutting down with reports the coordinator has not received");
  }
  return fatal;
}

void WorkerSession::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    if (shutting_down_.exchange(true)) return;
    shutdown_deadline_ = Clock::now() + config_.shutdown_grace;
    if (job_) job_->Cancel("the worker is shutting down");
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
  grpc::ClientContext context;
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    stream_context_ = &context;
  }
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
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    stream_context_ = nullptr;
  }
  if (!status.ok() && !shutting_down_.load()) {
    spdlog::warn("session stream ended: {}", status.error_message());
  }
}

bool WorkerSession::JobRunning() {
  std::lock_guard<std::mutex> lock(state_mutex_);
  return job_ && !job_->Finished();
}

bool WorkerSession::ReadyToClose() {
  if (!shutting_down_.load()) return false;
  if (Clock::now() >= shutdown_deadline_) return true;
  return !JobRunning() && outbox_.Empty();
}

void WorkerSession::WriteLoop(Stream* stream, std::atomic<bool>* broken) {
  std::string worker_id;
  std::chrono::milliseconds interval;
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    worker_id = worker_id_;
    interval = heartbeat_interval_;
  }
  auto write = [&](v1::WorkerMessage message) {
    message.set_worker_id(worker_id);
    if (stream->Write(message)) return true;
    broken->store(true);
    return false;
  };
  auto heartbeat = [&] {
    v1::WorkerMessage message;
    message.mutable_heartbeat()->set_unix_millis(NowUnixMillis());
    return write(std::move(message));
  };

  // The first message names the worker; a heartbeat does that at once.
  if (!heartbeat()) return;
  Clock::time_point next_heartbeat = Clock::now() + interval;
  while (!broken->load()) {
    if (ReadyToClose()) {
      stream->WritesDone();
      return;
    }
    outbox_.WaitForWork(next_heartbeat);
    if (broken->load()) return;
    if (Clock::now() >= next_heartbeat) {
      if (!heartbeat()) return;
      next_heartbeat = Clock::now() + interval;
    }
    const Outbox::Dropped dropped = outbox_.TakeDropped();
    if (dropped.count > 0) {
      const std::string text =
          absl::StrCat(dropped.count,
                       " step reports and log lines were dropped while the coordinator was "
                       "unreachable (the worker keeps the newest ",
                       config_.telemetry_buffer_capacity, ")");
      spdlog::warn("{}", text);
      v1::WorkerMessage message;
      v1::LogLine* line = message.mutable_log();
      line->set_job_id(dropped.job_id);
      line->set_unix_millis(NowUnixMillis());
      line->set_level("warn");
      line->set_text(text);
      if (!write(std::move(message))) return;
    }
    while (std::optional<v1::WorkerMessage> message = outbox_.FrontTelemetry()) {
      if (!write(std::move(*message))) return;
      outbox_.PopTelemetry();
      if (Clock::now() >= next_heartbeat) {
        if (!heartbeat()) return;
        next_heartbeat = Clock::now() + interval;
      }
    }
    if (std::optional<FinishedAttempt> finished = outbox_.FrontFinished()) {
      if (!WriteFinished(stream, *finished)) {
        broken->store(true);
        return;
      }
      outbox_.PopFinished();
    }
  }
}

bool WorkerSession::WriteFinished(Stream* stream, const FinishedAttempt& finished) {
  std::string worker_id;
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    worker_id = worker_id_;
  }
  v1::AttemptResult result = finished.result;
  if (!finished.artifact_path.empty()) {
    // Uploaded from offset 0 on every try: a session that broke mid-upload starts over.
    std::ifstream file(finished.artifact_path, std::ios::binary | std::ios::ate);
    if (!file) {
      result.set_ok(false);
      result.set_error(absl::StrCat("cannot read the exported model ", finished.artifact_path));
    } else {
      const int64_t total = file.tellg();
      file.seekg(0);
      std::string buffer(kArtifactChunkBytes, '\0');
      int64_t offset = 0;
      do {
        const int64_t size = std::min<int64_t>(kArtifactChunkBytes, total - offset);
        if (!file.read(buffer.data(), size)) {
          result.set_ok(false);
          result.set_error(
              absl::StrCat("reading the exported model ", finished.artifact_path, " failed"));
          break;
        }
        v1::WorkerMessage message;
        message.set_worker_id(worker_id);
        v1::ArtifactChunk* chunk = message.mutable_artifact();
        chunk->set_job_id(result.job_id());
        chunk->set_attempt(result.attempt());
        chunk->set_name("model.safetensors");
        chunk->mutable_chunk()->set_data(buffer.data(), size);
        chunk->mutable_chunk()->set_offset(offset);
        chunk->mutable_chunk()->set_total_bytes(total);
        offset += size;
        chunk->set_last(offset >= total);
        if (!stream->Write(message)) return false;
      } while (offset < total);
      if (result.ok()) {
        spdlog::info("job {}: uploaded the exported model ({} bytes)", result.job_id(), total);
      }
    }
  }
  v1::WorkerMessage message;
  message.set_worker_id(worker_id);
  *message.mutable_result() = result;
  return stream->Write(message);
}

void WorkerSession::HandleMessage(const v1::CoordinatorMessage& message) {
  switch (message.payload_case()) {
    case v1::CoordinatorMessage::kAssignment:
      HandleAssignment(message.assignment());
      break;
    case v1::CoordinatorMessage::kCancellation:
      HandleCancellation(message.cancellation());
      break;
    case v1::CoordinatorMessage::kHeartbeatAck:
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
    refused.result.set_error(why);
    outbox_.PushFinished(std::move(refused));
  };

  std::unique_ptr<JobRun> previous;
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    if (shutting_down_.load()) {
      refuse("the worker is shutting down");
      return;
    }
    if (job_ && !job_->Finished()) {
      if (job_->job_id() == assignment.job_id() && job_->attempt() == assignment.attempt() &&
          job_->rank() == assignment.rank()) {
        return;  // re-sent after a reconnect: already running it
      }
      refuse(absl::StrCat("the worker is busy with job ", job_->job_id(), " attempt ",
                          job_->attempt()));
      return;
    }
    if (finished_job_id_ == assignment.job_id() && finished_attempt_ == assignment.attempt()) {
      return;  // already ran it; its result is on the way
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
    job_ = std::make_unique<JobRun>(assignment, std::move(options), channel_, &outbox_);
    finished_job_id_ = assignment.job_id();
    finished_attempt_ = assignment.attempt();
    job_->Start();
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

}  // namespace fsdpd
