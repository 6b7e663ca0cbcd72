// The writing half of a Session stream: heartbeats, the outbox's reports, and finished
// attempts with rank 0's exported model.
#include <algorithm>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "worker/session.h"

namespace fsdpd {
namespace {

using Clock = std::chrono::steady_clock;
using Stream = grpc::ClientReaderWriter<v1::WorkerMessage, v1::CoordinatorMessage>;

constexpr size_t kArtifactChunkBytes = 1 << 20;
// Step reports one paced heartbeat carries at most: about 200 KB, far below the coordinator's
// message limit (--max-request-bytes, 4 MiB by default).
constexpr size_t kStepsPerHeartbeat = 1000;

int64_t NowUnixMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

bool WorkerSession::ReadyToClose() {
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    if (!shutting_down_.load()) return false;
    if (Clock::now() >= shutdown_deadline_) return true;
    // A wedged job never ends: close once the coordinator has acknowledged the unhealthy
    // report (a report only written could be lost with the stream's close).
    if (wedged_.load()) {
      const int64_t unhealthy = unhealthy_heartbeat_.load();
      return unhealthy > 0 && heartbeats_acked_.load() >= unhealthy;
    }
    if (job_ && !job_->Finished()) return false;
  }
  return outbox_.Empty();
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
  // While the coordinator paces this worker (CoordinatorMessage.paced_interval_millis), it beats
  // at that interval, and its step reports wait in the outbox and go inside the heartbeats.
  auto paced = [&] { return std::chrono::milliseconds(paced_interval_millis_.load()); };
  auto beat_interval = [&] { return std::max(interval, paced()); };
  // Every heartbeat states the worker's health; one goes out at once when the health changes.
  std::string sent_health;
  auto heartbeat = [&] {
    v1::WorkerMessage message;
    message.mutable_heartbeat()->set_unix_millis(NowUnixMillis());
    if (paced().count() > 0) {
      // Taken reports wait for their confirmation: a failed write resends them on the next
      // session.
      for (v1::StepReport& step : outbox_.TakeLeadingSteps(kStepsPerHeartbeat)) {
        *message.mutable_heartbeat()->add_steps() = std::move(step);
      }
    }
    const int64_t number = heartbeats_sent_.load() + 1;
    message.mutable_heartbeat()->set_sequence(number);
    const v1::WorkerHealth health = Health();
    if (health.ByteSizeLong() > 0) *message.mutable_heartbeat()->mutable_health() = health;
    if (!write(std::move(message))) return false;
    heartbeats_sent_.store(number);
    sent_health = health.SerializeAsString();
    if (!health.unhealthy().empty() && unhealthy_heartbeat_.load() == 0) {
      unhealthy_heartbeat_.store(number);
    }
    return true;
  };
  auto health_if_changed = [&] {
    if (Health().SerializeAsString() == sent_health) return true;
    return heartbeat();
  };

  // The first message names the worker; a heartbeat does that at once.
  if (!heartbeat()) return;
  Clock::time_point next_heartbeat = Clock::now() + beat_interval();
  while (!broken->load()) {
    if (ReadyToClose()) {
      stream->WritesDone();
      return;
    }
    outbox_.WaitForWork(next_heartbeat, paced().count() > 0 && !shutting_down_.load());
    if (broken->load()) return;
    if (!health_if_changed()) return;
    if (Clock::now() >= next_heartbeat) {
      if (!heartbeat()) return;
      next_heartbeat = Clock::now() + beat_interval();
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
      if (message->has_step() && paced().count() > 0) {
        // Held for the next heartbeat, unless a result (which must follow its steps) or the
        // end of the session waits behind them: then they go at once, in a heartbeat.
        if (!outbox_.HasFinished() && !shutting_down_.load()) break;
        if (!heartbeat()) return;
        next_heartbeat = Clock::now() + beat_interval();
        continue;
      }
      if (!write(std::move(*message))) return;
      outbox_.PopTelemetry();
      if (Clock::now() >= next_heartbeat) {
        if (!heartbeat()) return;
        next_heartbeat = Clock::now() + beat_interval();
      }
    }
    if (std::optional<FinishedExport> exported = outbox_.FrontExport()) {
      if (!WriteExport(stream, *exported)) {
        broken->store(true);
        return;
      }
      outbox_.PopExport();
    }
    if (std::optional<FinishedAttempt> finished = outbox_.FrontFinished()) {
      // A health the attempt's failure revealed (a root gone read-only) goes first, so the
      // coordinator does not place the retry here.
      if (!health_if_changed()) return;
      if (!WriteFinished(stream, *finished)) {
        broken->store(true);
        return;
      }
      outbox_.PopFinished();
    }
  }
}

bool WorkerSession::UploadArtifact(Stream* stream, const std::string& path,
                                   const std::string& job_id, int attempt, const std::string& name,
                                   std::string* error) {
  std::string worker_id;
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    worker_id = worker_id_;
  }
  // Uploaded from offset 0 on every try: a session that broke mid-upload starts over.
  std::ifstream file(path, std::ios::binary | std::ios::ate);
  if (!file) {
    *error = absl::StrCat("cannot read the exported model ", path);
    return true;
  }
  const int64_t total = file.tellg();
  file.seekg(0);
  std::string buffer(kArtifactChunkBytes, '\0');
  int64_t offset = 0;
  do {
    const int64_t size = std::min<int64_t>(kArtifactChunkBytes, total - offset);
    if (!file.read(buffer.data(), size)) {
      *error = absl::StrCat("reading the exported model ", path, " failed");
      return true;
    }
    v1::WorkerMessage message;
    message.set_worker_id(worker_id);
    v1::ArtifactChunk* chunk = message.mutable_artifact();
    chunk->set_job_id(job_id);
    chunk->set_attempt(attempt);
    chunk->set_name(name);
    chunk->mutable_chunk()->set_data(buffer.data(), size);
    chunk->mutable_chunk()->set_offset(offset);
    chunk->mutable_chunk()->set_total_bytes(total);
    offset += size;
    chunk->set_last(offset >= total);
    if (!stream->Write(message)) return false;
  } while (offset < total);
  spdlog::info("job {}: uploaded {} ({} bytes)", job_id, name, total);
  return true;
}

bool WorkerSession::WriteFinished(Stream* stream, const FinishedAttempt& finished) {
  std::string worker_id;
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    worker_id = worker_id_;
  }
  v1::AttemptResult result = finished.result;
  if (!finished.artifact_path.empty()) {
    std::string error;
    if (!UploadArtifact(stream, finished.artifact_path, result.job_id(), result.attempt(),
                        "model.safetensors", &error)) {
      return false;
    }
    if (!error.empty()) {
      result.set_ok(false);
      result.set_error(error);
    }
  }
  v1::WorkerMessage message;
  message.set_worker_id(worker_id);
  *message.mutable_result() = result;
  return stream->Write(message);
}

// A checkpoint's export: the file as chunks of attempt 0 (no attempt runs it), then the result.
bool WorkerSession::WriteExport(Stream* stream, const FinishedExport& finished) {
  std::string worker_id;
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    worker_id = worker_id_;
  }
  v1::ExportResult result = finished.result;
  if (result.ok() && !finished.artifact_path.empty()) {
    std::string error;
    if (!UploadArtifact(stream, finished.artifact_path, result.job_id(), 0, result.artifact_name(),
                        &error)) {
      return false;
    }
    if (!error.empty()) {
      result.set_ok(false);
      result.set_error(error);
    }
  }
  v1::WorkerMessage message;
  message.set_worker_id(worker_id);
  *message.mutable_export_result() = result;
  return stream->Write(message);
}

}  // namespace fsdpd
