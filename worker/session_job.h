// One rank of one attempt, run by the worker on a thread of its own. The trainer's reports and
// log lines go to the outbox; so does the attempt's result once RunTrainer returns.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "fsdpd/v1/worker.pb.h"
#include "grpcpp/channel.h"
#include "worker/session_outbox.h"
#include "worker/trainer.h"

namespace fsdpd {

struct JobRunOptions {
  std::string checkpoint_root;  // the job's directory is <checkpoint_root>/<job_uid>
  std::vector<std::string> allowed_roots;
  std::string bind_address;
  std::string device;
  // Called on the run's thread when an attempt failed (not when cancelled), before its result
  // is queued: the session probes its checkpoint root there, so the coordinator hears of a root
  // gone read-only before it places the retry.
  std::function<void()> after_failure;
};

// Bad input (files, paths, settings or shapes this worker cannot run) fails the same way on
// every try, so the coordinator fails the job at once instead of retrying it; everything else
// (crashes, lost peers, collective timeouts) is worth a retry. Classified by the status code
// the trainer returned.
bool IsPermanentFailure(const absl::Status& status);

class JobRun {
 public:
  // `channel` reaches the coordinator's rendezvous service; `outbox` must outlive the run.
  JobRun(v1::Assignment assignment, JobRunOptions options, std::shared_ptr<grpc::Channel> channel,
         Outbox* outbox);
  ~JobRun();  // cancels and joins a run that is still going
  JobRun(const JobRun&) = delete;
  JobRun& operator=(const JobRun&) = delete;

  void Start();
  // Asks the trainer to stop; it checks the flag between steps, and its data scans and
  // checkpoint writes between chunks. The first call is remembered (CancelledAt).
  void Cancel(const std::string& reason);
  // Hands a profiling request to the trainer, which polls for it between steps.
  void RequestProfile(const v1::ProfileRequest& request);
  bool Finished() const { return finished_.load(); }
  void Join();
  // When Cancel was first called, and why; nullopt while not cancelled.
  std::optional<std::chrono::steady_clock::time_point> CancelledAt();
  std::string CancelReason();
  // The trainer's latest log line: what the run is doing, or last started (it logs before
  // each step that may block: opening data, loading weights, writing a checkpoint).
  std::string LastActivity();

  const std::string& job_id() const { return assignment_.job_id(); }
  const std::string& job_uid() const { return assignment_.job_uid(); }
  int attempt() const { return assignment_.attempt(); }
  int rank() const { return assignment_.rank(); }

 private:
  void Body();
  FinishedAttempt Train();
  absl::StatusOr<RankContext> MakeRankContext() const;
  TrainerHooks MakeHooks(std::atomic<int64_t>& last_step, std::atomic<double>& last_loss);
  void Log(const std::string& level, const std::string& text);

  const v1::Assignment assignment_;
  const JobRunOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  Outbox* outbox_;
  std::atomic<bool> cancelled_{false};
  std::atomic<bool> finished_{false};
  // The last number given to a log line of this run (LogLine.sequence).
  std::atomic<int64_t> log_sequence_{0};
  std::mutex cancel_reason_mutex_;  // guards cancel_reason_ and cancelled_at_
  std::optional<std::chrono::steady_clock::time_point> cancelled_at_;
  std::mutex activity_mutex_;
  std::string last_activity_;
  // The trainer's way to abort its collectives while they exist (TrainerHooks::set_abort);
  // guarded by abort_mutex_, so the trainer cannot drop its communicator while Cancel uses it.
  std::mutex abort_mutex_;
  std::function<void()> abort_;
  std::string cancel_reason_;
  std::mutex profile_mutex_;
  std::optional<v1::ProfileRequest> profile_request_;
  std::thread thread_;
};

}  // namespace fsdpd
