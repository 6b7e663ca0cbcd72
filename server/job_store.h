// Durable state of the coordinator behind one interface, so the job manager can be tested with
// any implementation and the SQLite one can be swapped later. Every call is thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fsdpd/v1/jobs.pb.h"

namespace fsdpd::server {

// Which worker runs one rank of one attempt.
struct AssignmentRecord {
  std::string job_id;
  int attempt = 0;
  int rank = 0;
  std::string worker_id;
};

// One complete checkpoint of a job, as rank 0 reported it (CheckpointCommitted) with the hosts
// of the attempt that wrote it.
struct CheckpointRecord {
  std::string job_id;
  int64_t step = 0;
  int64_t commit_unix_millis = 0;
  int64_t size_bytes = 0;
  int attempt = 0;
  int world_size = 0;
  std::vector<std::string> hosts;  // sorted, each once
};

// One entry of a job's history in the order it happened: a state change or an aggregated step.
struct StoredEvent {
  int64_t sequence = 0;
  v1::JobEvent event;
};

class JobStore {
 public:
  virtual ~JobStore() = default;

  // "job-000001", "job-000002", ...: monotonic across restarts.
  virtual absl::StatusOr<std::string> NextJobId() = 0;

  // Stores a new job (state, spec, timestamps; its transitions are stored separately).
  virtual absl::Status InsertJob(const v1::Job& job) = 0;
  // Rewrites the job's row and appends the transition, atomically.
  virtual absl::Status RecordTransition(const v1::Job& job, int64_t sequence,
                                        const v1::StateChange& change) = 0;
  // All jobs with their transitions, in id order.
  virtual absl::StatusOr<std::vector<v1::Job>> LoadJobs() = 0;

  virtual absl::Status InsertAttempt(const std::string& job_id, int attempt,
                                     const std::vector<AssignmentRecord>& assignments,
                                     int64_t start_unix_millis) = 0;
  virtual absl::Status FinishAttempt(const std::string& job_id, int attempt, bool ok,
                                     const std::string& reason, int64_t end_unix_millis) = 0;
  virtual absl::StatusOr<std::vector<AssignmentRecord>> LoadAssignments(const std::string& job_id,
                                                                        int attempt) = 0;

  // An aggregated step and the job's progress, written at once: the history clients replay
  // must survive even a killed coordinator.
  virtual absl::Status RecordStep(const v1::Job& job, int64_t sequence,
                                  const v1::StepReport& aggregate) = 0;
  // These two may be buffered until Flush (or the store's own batching) writes them. Each kind
  // is numbered 1, 2, ... in the order it is appended, and written in that order: Append*
  // returns the row's number, and the row is stored once Stored*() reaches it. A log line with
  // a sequence is stored once per (job, attempt, rank, sequence); a second copy is ignored.
  virtual absl::StatusOr<int64_t> AppendStepReport(const v1::StepReport& report) = 0;
  virtual int64_t StoredStepReports() const = 0;
  virtual absl::StatusOr<int64_t> AppendLog(const v1::LogLine& line) = 0;
  virtual int64_t StoredLogs() const = 0;
  // Rows appended and not yet written, of both kinds: how far the store's writer is behind.
  virtual int64_t QueuedRows() const = 0;

  // The per-rank reports still kept (JobStoreConfig::rank_report_steps: the newest steps of
  // each attempt), by attempt, step and rank. Stored*() counts every report ever stored.
  virtual absl::StatusOr<std::vector<v1::StepReport>> LoadStepReports(
      const std::string& job_id) = 0;
  // Transitions and aggregated steps merged by sequence: every transition, and the newest
  // `max_steps` steps (every step when negative).
  virtual absl::StatusOr<std::vector<StoredEvent>> LoadEvents(const std::string& job_id,
                                                              int64_t max_steps = -1) = 0;
  // The last `tail` lines (all when tail <= 0), oldest first.
  virtual absl::StatusOr<std::vector<v1::LogLine>> LoadLogs(const std::string& job_id,
                                                            int64_t tail) = 0;
  // The bytes of text the job's stored log lines hold.
  virtual absl::StatusOr<int64_t> LogBytes(const std::string& job_id) = 0;

  // Stores `record` (replacing the row of the same job and step) and forgets the job's other
  // checkpoints whose step is not in `committed_steps`: rank 0 pruned them. Durable at once, or
  // with the caller's group.
  virtual absl::Status RecordCheckpoint(const CheckpointRecord& record,
                                        const std::vector<int64_t>& committed_steps) = 0;
  // The job's checkpoints, newest step first.
  virtual absl::StatusOr<std::vector<CheckpointRecord>> LoadCheckpoints(
      const std::string& job_id) = 0;

  // Writes everything buffered.
  virtual absl::Status Flush() = 0;

  // Groups the writes that are durable at once (transitions, aggregated steps, attempts) made by
  // the calling thread until EndGroup into one transaction, so a caller that handles a run of
  // messages commits once instead of once per write. They are durable when EndGroup returns.
  // Not nested. Other threads' writes wait for EndGroup.
  virtual void BeginGroup() {}
  virtual absl::Status EndGroup() { return absl::OkStatus(); }
  // Ends the group without committing: none of its writes are stored.
  virtual void AbortGroup() {}
};

}  // namespace fsdpd::server
