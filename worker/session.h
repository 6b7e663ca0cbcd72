// The worker's side of the coordinator protocol: register, keep one Session stream open, run
// the assignments that arrive on it, and survive a lost coordinator.
//
// On a lost stream the worker reconnects with capped, jittered exponential backoff and
// registers again with its previous worker id and the job it is running, so the coordinator can
// reconcile. A running job keeps training meanwhile; its reports wait in the bounded outbox
// (session_outbox.h) and are flushed once the session is back.
//
// Health (WorkerHealth, sent at registration and with heartbeats): the worker probes its
// checkpoint root at start, after each failed attempt and every 30 s while it is unwritable, and
// a watchdog gives an attempt cancel_grace to end once cancelled. An attempt still running then
// is blocked where the worker cannot interrupt it (a read from a hung file system): the worker
// reports itself unhealthy, so the coordinator stops assigning to it, closes its session and Run
// returns; its process must then exit (fsdpd-worker exits with status 3) for its supervisor to
// start it afresh, since only that frees the blocked thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "fsdpd/v1/worker.grpc.pb.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "worker/device/oom_evidence.h"
#include "worker/session_device.h"
#include "worker/session_export.h"
#include "worker/session_job.h"
#include "worker/session_outbox.h"

namespace fsdpd {

struct WorkerConfig {
  std::string coordinator_address = "127.0.0.1:7070";
  std::string device = "cpu";
  std::string checkpoint_root;
  std::string hostname;
  std::string address = "127.0.0.1";  // where peers reach this worker
  std::chrono::milliseconds heartbeat_interval{1000};
  std::vector<std::string> allowed_roots;
  // PEM contents (LoadWorkerTls). tls_ca_pem non-empty: the coordinator is reached over TLS;
  // with the certificate and key the worker also proves itself to it (mutual TLS).
  std::string tls_ca_pem;
  std::string tls_cert_pem;
  std::string tls_key_pem;
  // The worker token (LoadWorkerToken), sent as a bearer token on every call; "" sends none.
  std::string token;
  // Step reports and log lines kept while the coordinator is unreachable.
  size_t telemetry_buffer_capacity = 20000;
  std::chrono::milliseconds reconnect_initial_backoff{250};
  std::chrono::milliseconds reconnect_max_backoff{5000};
  // How long shutdown waits for a cancelled job to report its result.
  std::chrono::milliseconds shutdown_grace{10000};
  // How long an attempt may take to end once cancelled before the worker reports itself
  // unhealthy and gives up (--cancel-grace). Steps, data scans and checkpoint writes look at the
  // cancellation between chunks, well within this.
  std::chrono::milliseconds cancel_grace{60000};
};

// Names the first bad field, e.g. "--heartbeat-interval: must be positive".
absl::Status ValidateWorkerConfig(const WorkerConfig& config);

// Reads --tls-ca, --tls-cert and --tls-key into config. Empty paths are skipped; a certificate
// needs its key and the CA, since a client certificate is only sent over TLS.
absl::Status LoadWorkerTls(const std::string& ca_path, const std::string& cert_path,
                           const std::string& key_path, WorkerConfig* config);

class WorkerSession {
 public:
  WorkerSession(WorkerConfig config, DeviceInfo device);
  ~WorkerSession();

  // Serves until Shutdown(); reconnects on its own. Returns an error only for problems that
  // retrying cannot fix, among them a wedged attempt (then wedged() is true, and the caller
  // must end the process without destroying this session: the attempt's thread still runs).
  absl::Status Run();
  // Whether an attempt did not end within cancel_grace of its cancellation.
  bool wedged() const { return wedged_.load(); }
  // Thread-safe: cancels a running job, sends its result if the session is up, and makes Run
  // return.
  void Shutdown();

 private:
  absl::Status Register();
  // One Session stream, from opening to its end.
  void RunStream();
  void WriteLoop(grpc::ClientReaderWriter<v1::WorkerMessage, v1::CoordinatorMessage>* stream,
                 std::atomic<bool>* broken);
  bool WriteFinished(grpc::ClientReaderWriter<v1::WorkerMessage, v1::CoordinatorMessage>* stream,
                     const FinishedAttempt& finished);
  bool WriteExport(grpc::ClientReaderWriter<v1::WorkerMessage, v1::CoordinatorMessage>* stream,
                   const FinishedExport& finished);
  // Uploads the file at `path` as ArtifactChunks of (job_id, attempt) named `name`, from offset
  // 0. False when the stream broke; a file that cannot be read sets `error` instead.
  bool UploadArtifact(grpc::ClientReaderWriter<v1::WorkerMessage, v1::CoordinatorMessage>* stream,
                      const std::string& path, const std::string& job_id, int attempt,
                      const std::string& name, std::string* error);
  void HandleMessage(const v1::CoordinatorMessage& message);
  void HandleAssignment(const v1::Assignment& assignment);
  void HandleCancellation(const v1::Cancellation& cancellation);
  void HandleProfileRequest(const v1::ProfileRequest& request);
  // Starts consolidating a checkpoint on a thread (session_export.h), one at a time.
  void HandleExportRequest(const v1::ExportRequest& request);
  bool ReadyToClose();
  void SleepBeforeReconnect(std::chrono::milliseconds backoff);
  // Health (session_health.cc).
  v1::WorkerHealth Health();
  // Probes the checkpoint root and records the answer for the next heartbeat.
  void CheckCheckpointRoot();
  // While the root is unwritable and no job runs: probes again (every 30 s, from WatchLoop), so
  // a fixed root brings the worker back. With no job there is nothing for the watchdog to miss
  // should the probe itself block on a hung file system.
  void RecheckUnwritableRoot();
  // The watchdog: wakes every cancel_grace / 10 (50 ms to 1 s) until Run ends.
  void WatchLoop();
  // Whether the job was cancelled longer than cancel_grace ago and still runs; then marks the
  // worker unhealthy and shuts the session down.
  void CheckWedged();
  // Waits until `job` finished (then joins it) or the worker is wedged (then leaks it: its
  // thread cannot be joined).
  void EndJob(std::unique_ptr<JobRun> job);

  const WorkerConfig config_;
  const DeviceInfo device_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::WorkerService::Stub> stub_;
  Outbox outbox_;

  std::mutex health_mutex_;
  v1::WorkerHealth health_;
  std::atomic<bool> wedged_{false};
  // On the current stream: the heartbeats written, the highest number the coordinator has
  // acknowledged (it echoes a heartbeat's number after applying the health it carries), and the
  // number of the first one that carried the unhealthy report. Once that one is acknowledged the
  // coordinator knows, and a wedged session may close.
  std::atomic<int64_t> heartbeats_sent_{0};
  std::atomic<int64_t> heartbeats_acked_{0};
  std::atomic<int64_t> unhealthy_heartbeat_{0};
  // The coordinator's pacing from its latest heartbeat ack (0: send step reports as they come).
  std::atomic<int64_t> paced_interval_millis_{0};
  std::atomic<bool> watch_stop_{false};
  std::mutex watch_mutex_;
  std::condition_variable watch_changed_;

  std::atomic<bool> shutting_down_{false};
  std::chrono::steady_clock::time_point shutdown_deadline_;
  std::mutex sleep_mutex_;
  std::condition_variable sleep_changed_;

  std::mutex state_mutex_;
  std::string worker_id_;
  std::chrono::milliseconds heartbeat_interval_;
  grpc::ClientContext* register_context_ = nullptr;  // a Register in flight, for Shutdown
  std::unique_ptr<JobRun> job_;
  std::unique_ptr<ExportRun> export_;
  // The last attempt this worker started, by the job's unique id (display ids restart in a new
  // state folder), so an assignment re-sent after a reconnect is not run twice.
  std::string started_job_uid_;
  int started_attempt_ = -1;
  // The attempt each run starts, for the next process to tell an OOM kill (oom_evidence.h), and
  // the previous process's, reported at registration until the coordinator has it.
  OomEvidence oom_evidence_;
  std::optional<OomKillReport> previous_oom_kill_;
};

}  // namespace fsdpd
