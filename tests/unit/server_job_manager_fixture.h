// The job manager's test fixture: a real SQLite store, fake worker sessions and subscribers,
// and a hand-driven clock (server_job_manager_test.cc, _recovery_test.cc, _logs_test.cc).
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>

#include "absl/strings/str_cat.h"
#include "proto/spec/job_spec.h"
#include "server/job_manager.h"
#include "server/sqlite_job_store.h"
#include "tests/support/test_specs.h"

namespace fsdpd::server {

using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

class FakeSession : public WorkerSession {
 public:
  void Send(const v1::CoordinatorMessage& message) override { messages.push_back(message); }
  void Close(const absl::Status& status) override { closed = status; }
  std::vector<v1::Assignment> Assignments() const {
    std::vector<v1::Assignment> found;
    for (const auto& message : messages) {
      if (message.has_assignment()) found.push_back(message.assignment());
    }
    return found;
  }
  int Cancellations() const {
    int count = 0;
    for (const auto& message : messages) count += message.has_cancellation() ? 1 : 0;
    return count;
  }
  std::vector<v1::CoordinatorMessage> messages;
  std::optional<absl::Status> closed;
};

class FakeSubscriber : public JobSubscriber {
 public:
  void OnEvent(const v1::JobEvent& event) override { events.push_back(event); }
  void OnLog(const v1::LogLine& line) override { logs.push_back(line); }
  void OnEnd(const absl::Status& status) override { ended = status; }
  std::vector<v1::JobEvent> events;
  std::vector<v1::LogLine> logs;
  std::optional<absl::Status> ended;
};

inline v1::JobSpec SmallSpec(int world_size, int max_restarts) {
  v1::JobSpec spec = ::fsdpd::testing::TinyJobSpec();
  spec.mutable_train()->set_steps(10);
  spec.mutable_parallel()->set_world_size(world_size);
  spec.set_max_restarts(max_restarts);
  return spec;
}

// One coordinator's worth of components; Restart() drops the in-memory ones as a crash would.
class JobManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/fsdpd-jobs-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    directory_ = pattern;
    Start();
  }
  void TearDown() override {
    Stop();
    std::filesystem::remove_all(directory_);
  }

  void Start() {
    JobStoreConfig store_config;
    store_config.database_path = directory_ + "/fsdpd.db";
    store_ = std::move(*SqliteJobStore::Open(store_config));
    registry_ = std::make_unique<WorkerRegistry>(registry_config_);
    rendezvous_ = std::make_unique<RendezvousStore>(RendezvousConfig{});
    JobManagerConfig config;
    config.artifact_dir = directory_ + "/artifacts";
    config.max_world_size = 8;
    config.max_log_bytes_per_job = max_log_bytes_;
    config.watch_replay_steps = watch_replay_steps_;
    config.max_priority_admin = max_priority_admin_;
    jobs_ = std::make_unique<JobManager>(config, *store_, *registry_, *rendezvous_,
                                         [this] { return now_; });
    ASSERT_TRUE(jobs_->Load().ok());
  }
  void Stop() {
    jobs_.reset();
    rendezvous_.reset();
    registry_.reset();
    store_.reset();
  }
  void Restart() {
    Stop();
    sessions_.clear();
    Start();
  }

  // Registers a worker and opens its session; returns its id.
  std::string AddWorker(const std::string& host, int gpu, const std::string& id = "",
                        const RankAssignment& running = {}, int64_t memory = 8ll << 30) {
    v1::RegisterRequest request;
    request.set_worker_id(id);
    request.set_hostname(host);
    request.set_device_kind("cpu");
    request.set_gpu_index(gpu);
    request.set_memory_bytes(memory);
    if (running.active()) {
      request.set_running_job_id(running.job_id);
      request.set_running_attempt(running.attempt);
      request.set_running_rank(running.rank);
    }
    absl::StatusOr<v1::RegisterResponse> response = jobs_->RegisterWorker(request);
    EXPECT_TRUE(response.ok()) << response.status();
    auto session = std::make_shared<FakeSession>();
    EXPECT_TRUE(jobs_->OpenSession(response->worker_id(), session).ok());
    sessions_[response->worker_id()] = session;
    return response->worker_id();
  }

  void Step(const std::string& worker, const std::string& job, int attempt, int rank, int step,
            double loss, double tokens_per_second, int64_t memory_peak = 0,
            int64_t memory_reserved = 0) {
    v1::WorkerMessage message;
    v1::StepReport* report = message.mutable_step();
    report->set_job_id(job);
    report->set_attempt(attempt);
    report->set_rank(rank);
    report->set_step(step);
    report->set_loss(loss);
    report->set_tokens_per_second(tokens_per_second);
    report->set_memory_peak_bytes(memory_peak);
    report->set_memory_reserved_bytes(memory_reserved);
    jobs_->OnWorkerMessage(worker, message);
  }

  // A log line of attempt 1, rank 0; sequence 0 is an unnumbered line.
  void SendLog(const std::string& worker, const std::string& job, int64_t sequence,
               const std::string& text) {
    v1::WorkerMessage message;
    v1::LogLine* line = message.mutable_log();
    line->set_job_id(job);
    line->set_attempt(1);
    line->set_sequence(sequence);
    line->set_text(text);
    jobs_->OnWorkerMessage(worker, message);
  }

  void Result(const std::string& worker, const std::string& job, int attempt, int rank, bool ok,
              const std::string& error = "", bool cancelled = false) {
    v1::WorkerMessage message;
    v1::AttemptResult* result = message.mutable_result();
    result->set_job_id(job);
    result->set_attempt(attempt);
    result->set_rank(rank);
    result->set_ok(ok);
    result->set_error(error);
    result->set_cancelled(cancelled);
    result->set_final_step(10);
    jobs_->OnWorkerMessage(worker, message);
  }

  void Heartbeat(const std::string& worker) {
    v1::WorkerMessage message;
    message.mutable_heartbeat()->set_unix_millis(1);
    jobs_->OnWorkerMessage(worker, message);
  }

  // Limits the store to the pages it has now, so the next write that needs a page fails as on
  // a full disk (SQLITE_FULL); LimitPages(1 << 30) gives the room back.
  void FreezeStoreSize() {
    absl::StatusOr<int64_t> pages = store_->LimitPages(0);  // 0 reads the page count
    ASSERT_TRUE(pages.ok()) << pages.status();
    ASSERT_TRUE(store_->LimitPages(*pages).ok());
  }

  v1::Job GetJob(const std::string& id) { return *jobs_->Get(id); }
  v1::WorkerState StateOf(const std::string& worker) {
    return registry_->Find(worker)->info.state();
  }

  std::string directory_;
  int64_t max_log_bytes_ = JobManagerConfig{}.max_log_bytes_per_job;
  int64_t watch_replay_steps_ = JobManagerConfig{}.watch_replay_steps;
  int max_priority_admin_ = JobManagerConfig{}.max_priority_admin;
  WorkerRegistryConfig registry_config_;
  Clock::time_point now_ = Clock::time_point(std::chrono::hours(1));
  std::unique_ptr<SqliteJobStore> store_;
  std::unique_ptr<WorkerRegistry> registry_;
  std::unique_ptr<RendezvousStore> rendezvous_;
  std::unique_ptr<JobManager> jobs_;
  std::map<std::string, std::shared_ptr<FakeSession>> sessions_;
};

// The steps of a job's stored step events, in order.
inline std::vector<int64_t> StepsOf(const std::vector<StoredEvent>& events) {
  std::vector<int64_t> steps;
  for (const StoredEvent& event : events) {
    if (event.event.has_step()) steps.push_back(event.event.step().step());
  }
  return steps;
}

// The ReportsStored entries of the heartbeat acks a worker received since `from`.
inline std::vector<v1::ReportsStored> Confirmations(const FakeSession& session, size_t from) {
  std::vector<v1::ReportsStored> found;
  for (size_t i = from; i < session.messages.size(); ++i) {
    for (const v1::ReportsStored& stored : session.messages[i].reports_stored()) {
      found.push_back(stored);
    }
  }
  return found;
}

}  // namespace fsdpd::server
