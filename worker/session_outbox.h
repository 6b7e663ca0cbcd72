// Everything the worker sends to the coordinator passes through the outbox, so a running job
// never blocks on the network and its reports survive a lost session.
//
// Telemetry (step reports, log lines, profile reports) is bounded: while the coordinator is
// unreachable the outbox keeps the newest `telemetry_capacity` messages and drops the oldest
// step report or log line (profile traces only make sense whole), counting them so the loss is
// reported once the session is back. Attempt results (with rank 0's exported
// model) are never dropped; they are sent after the telemetry queued before them.
//
// A step report, numbered log line or committed checkpoint that was sent stays in the outbox
// until the coordinator confirms it stored it (ReportsStored). A new session sends the
// unconfirmed ones again first, so a coordinator killed before writing them loses none. A
// committed checkpoint (CheckpointCommitted) is never dropped for room.
//
// Exports (a checkpoint consolidated into a safetensors file for the coordinator) queue apart
// and are never dropped: their file is uploaded, then their ExportResult sent.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "fsdpd/v1/worker.pb.h"

namespace fsdpd {

struct FinishedAttempt {
  v1::AttemptResult result;
  // Rank 0's consolidated safetensors file, uploaded before the result; empty otherwise.
  std::string artifact_path;
};

struct FinishedExport {
  v1::ExportResult result;
  // The consolidated safetensors file, uploaded before the result when result.ok().
  std::string artifact_path;
};

class Outbox {
 public:
  explicit Outbox(size_t telemetry_capacity);

  // Queues a step report, log line or checkpoint; drops the oldest step report or log line
  // when full.
  void PushTelemetry(v1::WorkerMessage message);
  void PushFinished(FinishedAttempt attempt);
  void PushExport(FinishedExport finished);
  std::optional<FinishedExport> FrontExport();
  void PopExport();

  // Blocks until something is queued, `until` passes, or Wake() is called. With `hold_steps`
  // (the coordinator paces the worker), step reports at the front of the queue do not count:
  // they wait for the next heartbeat.
  void WaitForWork(std::chrono::steady_clock::time_point until, bool hold_steps = false);
  void Wake();

  // The writer peeks, sends, and pops only once the send worked, so nothing is lost to a
  // write that fails. A popped step report or numbered log line waits for its confirmation.
  std::optional<v1::WorkerMessage> FrontTelemetry();
  void PopTelemetry();
  // Takes up to `max` step reports from the front of the queue, oldest first, for one paced
  // heartbeat (Heartbeat.steps); each then waits for its confirmation as a popped one does.
  std::vector<v1::StepReport> TakeLeadingSteps(size_t max);
  // Whether an attempt's result waits to be sent.
  bool HasFinished();
  // Forgets the sent messages the coordinator stored.
  void ConfirmStored(const v1::ReportsStored& stored);
  // Puts the sent but unconfirmed messages back in front of the queue, in order: called when a
  // new session starts.
  void RequeueUnconfirmed();
  size_t UnconfirmedCount();
  std::optional<FinishedAttempt> FrontFinished();
  void PopFinished();
  bool Empty();
  // The oldest result not yet sent, even if reports still queue before it.
  std::optional<v1::AttemptResult> OldestUnsentResult();

  struct Dropped {
    int64_t count = 0;
    std::string job_id;  // the job whose messages were dropped last
  };
  // Returns and resets the number of messages dropped since the last call.
  Dropped TakeDropped();

 private:
  const size_t telemetry_capacity_;
  std::mutex mutex_;
  std::condition_variable changed_;
  bool woken_ = false;
  std::deque<v1::WorkerMessage> telemetry_;
  // Sent step reports and numbered log lines, oldest first; at most telemetry_capacity_.
  std::deque<v1::WorkerMessage> unconfirmed_;
  std::deque<FinishedAttempt> finished_;
  std::deque<FinishedExport> exports_;
  Dropped dropped_;
};

}  // namespace fsdpd
