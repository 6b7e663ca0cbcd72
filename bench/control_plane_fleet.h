// Simulated fsdpd workers for the control-plane load benchmark: each one Registers and keeps one
// Session stream open, beats every second and, once it holds an assignment and stepping is on,
// streams StepReports with increasing step numbers (10 a second, or fewer). While the
// coordinator paces them, they beat at its interval and send the reports inside heartbeats, as
// real workers do. They never send a
// result, so their jobs stay RUNNING for the whole measurement.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "fsdpd/v1/jobs.pb.h"
#include "fsdpd/v1/worker.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace fsdpd::bench {

// What one simulated worker holds and has sent, read after the measurement.
struct WorkerTally {
  std::string worker_id;
  std::string job_id;  // empty: never assigned
  int attempt = 0;
  int rank = 0;
  int64_t steps_written = 0;   // step reports the transport accepted (= the last step number)
  int64_t confirmed_step = 0;  // the coordinator stored every step through this one
  int64_t queued_steps = 0;    // step reports not yet written
  int64_t heartbeats_written = 0;
  int64_t acks_received = 0;
  size_t max_queue = 0;
  int64_t max_paced_millis = 0;  // the slowest pacing the coordinator asked for
  bool stream_ended = false;
  // More than one, or a cancellation: the coordinator failed an attempt (e.g. it declared the
  // worker lost because it read heartbeats too late).
  int assignments = 0;
  bool cancelled = false;
};

class SimulatedWorker : public grpc::ClientBidiReactor<v1::WorkerMessage, v1::CoordinatorMessage> {
 public:
  SimulatedWorker(std::shared_ptr<grpc::Channel> channel, std::string hostname, int index);

  // Synchronous Register, then opens the Session (the first message carries the id).
  absl::Status RegisterAndOpen();
  // Called by the fleet's tick threads every 100 ms; `tick` counts from the fleet's start.
  // A step report goes out every `ticks_per_step` ticks (1: 10 a second).
  void Tick(int64_t tick, bool stepping, int ticks_per_step = 1);
  bool Assigned() const;
  bool Idle() const;  // nothing queued or in flight
  WorkerTally Tally() const;

  void OnWriteDone(bool ok) override;
  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  void Enqueue(v1::WorkerMessage message);

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::WorkerService::Stub> stub_;
  grpc::ClientContext context_;
  const std::string hostname_;
  const int index_;
  std::string worker_id_;
  v1::CoordinatorMessage incoming_;

  mutable std::mutex mutex_;
  std::deque<v1::WorkerMessage> queue_;  // front() is in flight while writing_
  bool writing_ = false;
  bool done_ = false;
  std::string job_id_;
  int attempt_ = 0;
  int rank_ = 0;
  int64_t next_step_ = 1;
  int assignments_ = 0;
  bool cancelled_ = false;
  int64_t steps_written_ = 0;
  int64_t heartbeats_written_ = 0;
  int64_t beats_ = 0;  // numbered 1, 2, ... as a real worker numbers them (Heartbeat.sequence)
  int64_t acks_received_ = 0;
  int64_t confirmed_step_ = 0;
  size_t max_queue_ = 0;
  // The coordinator's pacing (CoordinatorMessage.paced_interval_millis) and the step reports
  // waiting for the next heartbeat meanwhile.
  int64_t paced_millis_ = 0;
  int64_t max_paced_millis_ = 0;
  std::vector<v1::StepReport> held_steps_;
};

// A job the simulated workers can hold a rank of: the smallest CPU model, with so many steps
// that it never ends (the workers send no result), no checkpoints and no profiling.
v1::JobSpec TinyJobSpec(int world_size, const std::string& name);

struct FleetConfig {
  std::string target;  // host:port of the coordinator
  int workers = 100;
  int workers_per_connection = 1;
  int workers_per_host = 8;  // the scheduler packs ranks onto hosts by name
  int tick_threads = 2;
  int reports_per_second = 10;  // per worker, while stepping: 10, 5, 2 or 1
};

class Fleet {
 public:
  explicit Fleet(FleetConfig config);
  ~Fleet();

  absl::Status Start();  // registers every worker, opens sessions, starts ticking
  // Waits until `count` workers hold an assignment; false on timeout.
  bool WaitForAssignments(int count, std::chrono::seconds timeout) const;
  int AssignedCount() const;
  void SetStepping(bool stepping) { stepping_ = stepping; }
  // Waits until every worker's queue is empty; false on timeout.
  bool WaitForDrain(std::chrono::seconds timeout) const;
  // Waits until the coordinator confirmed (heartbeat acks' ReportsStored) every step report
  // each worker sent; false on timeout. Needs the fleet ticking (heartbeats).
  bool WaitForConfirmations(std::chrono::seconds timeout) const;
  void StopTicking();
  std::vector<WorkerTally> Tallies() const;
  int64_t late_slots() const { return late_slots_; }

 private:
  void TickLoop(int thread_index);

  const FleetConfig config_;
  std::vector<std::shared_ptr<grpc::Channel>> channels_;
  std::vector<std::unique_ptr<SimulatedWorker>> workers_;
  std::vector<std::thread> threads_;
  // Workers [0, opened_) have a Session; the tick threads beat only for those, while the
  // rest are still registering (5,000 registrations take longer than a heartbeat timeout).
  std::atomic<size_t> opened_{0};
  std::atomic<bool> stepping_{false};
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> late_slots_{0};
};

}  // namespace fsdpd::bench
