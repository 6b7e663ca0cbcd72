// The job state machine end to end against a real SQLite store, with fake worker sessions and a
// hand-driven clock.
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
namespace {

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

v1::JobSpec SmallSpec(int world_size, int max_restarts) {
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
    registry_ = std::make_unique<WorkerRegistry>(WorkerRegistryConfig{});
    rendezvous_ = std::make_unique<RendezvousStore>(RendezvousConfig{});
    JobManagerConfig config;
    config.artifact_dir = directory_ + "/artifacts";
    config.max_world_size = 8;
    config.max_log_bytes_per_job = max_log_bytes_;
    config.watch_replay_steps = watch_replay_steps_;
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

  v1::Job GetJob(const std::string& id) { return *jobs_->Get(id); }
  v1::WorkerState StateOf(const std::string& worker) {
    return registry_->Find(worker)->info.state();
  }

  std::string directory_;
  int64_t max_log_bytes_ = JobManagerConfig{}.max_log_bytes_per_job;
  int64_t watch_replay_steps_ = JobManagerConfig{}.watch_replay_steps;
  Clock::time_point now_ = Clock::time_point(std::chrono::hours(1));
  std::unique_ptr<SqliteJobStore> store_;
  std::unique_ptr<WorkerRegistry> registry_;
  std::unique_ptr<RendezvousStore> rendezvous_;
  std::unique_ptr<JobManager> jobs_;
  std::map<std::string, std::shared_ptr<FakeSession>> sessions_;
};

TEST_F(JobManagerTest, BadSpecsAreRejectedByFieldAndNothingIsStored) {
  v1::JobSpec spec = SmallSpec(2, 0);
  spec.mutable_model()->set_heads(3);  // 64 is not divisible by 3
  absl::StatusOr<std::string> id = jobs_->Submit(spec);
  ASSERT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(id.status().message()), HasSubstr("model."));

  id = jobs_->Submit(SmallSpec(16, 0));  // above max_world_size = 8
  ASSERT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(id.status().message()), HasSubstr("parallel.world_size"));

  AddWorker("small-host", 0, "", {}, /*memory=*/1024);
  id = jobs_->Submit(SmallSpec(1, 0));
  ASSERT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(id.status().message()), HasSubstr("parallel.device"));
  EXPECT_THAT(std::string(id.status().message()), HasSubstr("memory"));

  EXPECT_TRUE(jobs_->List({}, 0).empty());
  EXPECT_TRUE(store_->LoadJobs()->empty());
}

TEST_F(JobManagerTest, GangRunsToSuccessWithAggregatedSteps) {
  const std::string w0 = AddWorker("host-a", 0);
  const std::string w1 = AddWorker("host-a", 1);
  const std::string id = *jobs_->Submit(SmallSpec(2, 0));
  EXPECT_EQ(id, "job-000001");

  v1::Job job = GetJob(id);
  EXPECT_EQ(job.state(), v1::SCHEDULED);
  EXPECT_EQ(job.attempt(), 1);
  ASSERT_EQ(job.worker_ids_size(), 2);
  EXPECT_EQ(job.worker_ids(0), w0);
  ASSERT_EQ(sessions_[w0]->Assignments().size(), 1u);
  const v1::Assignment assignment = sessions_[w1]->Assignments().front();
  EXPECT_EQ(assignment.rank(), 1);
  EXPECT_EQ(assignment.world_size(), 2);
  EXPECT_EQ(assignment.rendezvous_scope(), id + "/1");
  EXPECT_EQ(assignment.spec().name(), "tiny");
  EXPECT_TRUE(rendezvous_->HasScope(id, 1));
  EXPECT_EQ(StateOf(w0), v1::BUSY);

  auto watcher = std::make_shared<FakeSubscriber>();
  ASSERT_TRUE(jobs_->Watch(id, watcher).ok());

  Step(w0, id, 1, 0, 1, 5.5, 100, 1000, /*memory_reserved=*/4000);
  EXPECT_EQ(GetJob(id).state(), v1::RUNNING);
  EXPECT_EQ(GetJob(id).step(), 0);  // rank 1 has not reported step 1 yet
  Step(w1, id, 1, 1, 1, 9.9, 150, 3000, /*memory_reserved=*/3500);
  job = GetJob(id);
  EXPECT_EQ(job.step(), 1);
  EXPECT_DOUBLE_EQ(job.loss(), 5.5);               // rank 0's (already all-reduced) loss
  EXPECT_DOUBLE_EQ(job.tokens_per_second(), 250);  // summed over ranks

  Result(w0, id, 1, 0, true);
  EXPECT_EQ(GetJob(id).state(), v1::RUNNING);
  Result(w1, id, 1, 1, true);
  job = GetJob(id);
  EXPECT_EQ(job.state(), v1::SUCCEEDED);
  EXPECT_GT(job.finished_unix_millis(), 0);
  EXPECT_EQ(StateOf(w0), v1::IDLE);
  EXPECT_EQ(StateOf(w1), v1::IDLE);
  EXPECT_FALSE(rendezvous_->HasScope(id, 1));

  std::vector<v1::JobState> states;
  for (const v1::StateChange& change : job.transitions()) {
    states.push_back(change.state());
    EXPECT_FALSE(change.reason().empty());
    EXPECT_GT(change.unix_millis(), 0);
  }
  EXPECT_THAT(states,
              ::testing::ElementsAre(v1::PENDING, v1::SCHEDULED, v1::RUNNING, v1::SUCCEEDED));

  // The watcher saw RUNNING, one aggregated step with the max memory (each figure its own
  // maximum over the ranks), then SUCCEEDED and end.
  ASSERT_EQ(watcher->events.size(), 3u);
  EXPECT_EQ(watcher->events[0].state().state(), v1::RUNNING);
  EXPECT_EQ(watcher->events[1].step().memory_peak_bytes(), 3000);
  EXPECT_EQ(watcher->events[1].step().memory_reserved_bytes(), 4000);
  EXPECT_EQ(watcher->events[2].state().state(), v1::SUCCEEDED);
  ASSERT_TRUE(watcher->ended.has_value());
  EXPECT_TRUE(watcher->ended->ok());

  // A later watcher gets the same history from the store, in order, and no subscription.
  auto late = std::make_shared<FakeSubscriber>();
  absl::StatusOr<JobManager::History> history = jobs_->Watch(id, late);
  ASSERT_TRUE(history.ok());
  EXPECT_TRUE(history->ended);
  ASSERT_EQ(history->events.size(), 5u);
  EXPECT_EQ(history->events[0].state().state(), v1::PENDING);
  EXPECT_TRUE(history->events[3].has_step());
  EXPECT_EQ(history->events[4].state().state(), v1::SUCCEEDED);
}

// A watch replays every state change but only the newest --watch-replay-steps steps (its
// history is read under the manager's lock), then follows live; a restart resumes the
// sequence after the last stored event.
TEST_F(JobManagerTest, AWatchReplaysOnlyTheNewestSteps) {
  watch_replay_steps_ = 3;
  Restart();
  const std::string w0 = AddWorker("host-a", 0);
  const std::string id = *jobs_->Submit(SmallSpec(1, 0));
  for (int step = 1; step <= 8; ++step) Step(w0, id, 1, 0, step, 1.0, 100);
  absl::StatusOr<JobManager::History> history = jobs_->Watch(id, nullptr);
  ASSERT_TRUE(history.ok()) << history.status();
  std::vector<int64_t> steps;
  std::vector<v1::JobState> states;
  for (const v1::JobEvent& event : history->events) {
    if (event.has_step()) {
      steps.push_back(event.step().step());
    } else {
      states.push_back(event.state().state());
    }
  }
  EXPECT_EQ(steps, (std::vector<int64_t>{6, 7, 8}));
  EXPECT_EQ(states, (std::vector<v1::JobState>{v1::PENDING, v1::SCHEDULED, v1::RUNNING}));

  Restart();  // the next event's sequence follows the last stored one
  auto watcher = std::make_shared<FakeSubscriber>();
  ASSERT_TRUE(jobs_->Watch(id, watcher).ok());
  const std::string again = AddWorker("host-a", 0, w0, RankAssignment{id, 1, 0});
  Step(again, id, 1, 0, 9, 1.0, 100);
  absl::StatusOr<JobManager::History> after = jobs_->Watch(id, nullptr);
  ASSERT_TRUE(after.ok()) << after.status();
  ASSERT_FALSE(after->events.empty());
  EXPECT_EQ(after->events.back().step().step(), 9);
  const absl::StatusOr<std::vector<StoredEvent>> stored = store_->LoadEvents(id);
  ASSERT_TRUE(stored.ok()) << stored.status();
  int64_t sequence = 0;
  for (const StoredEvent& event : *stored) {
    EXPECT_GT(event.sequence, sequence) << "sequences stay unique and increasing";
    sequence = event.sequence;
  }
}

// The ReportsStored entries of the heartbeat acks a worker received since `from`.
std::vector<v1::ReportsStored> Confirmations(const FakeSession& session, size_t from) {
  std::vector<v1::ReportsStored> found;
  for (size_t i = from; i < session.messages.size(); ++i) {
    for (const v1::ReportsStored& stored : session.messages[i].reports_stored()) {
      found.push_back(stored);
    }
  }
  return found;
}

// A worker learns which of its step reports are stored, so it can forget them; until then it
// keeps them to send again after a coordinator restart.
TEST_F(JobManagerTest, HeartbeatAcksConfirmStoredReportsOnly) {
  const std::string w0 = AddWorker("host-a", 0);
  const std::string w1 = AddWorker("host-a", 1);
  const std::string id = *jobs_->Submit(SmallSpec(2, 0));
  for (int step = 1; step <= 3; ++step) {
    Step(w0, id, 1, 0, step, 5.0, 100);
    Step(w1, id, 1, 1, step, 5.0, 100);
  }
  // Buffered, not yet written (batch_rows is larger): nothing is confirmed.
  size_t seen = sessions_[w0]->messages.size();
  Heartbeat(w0);
  EXPECT_TRUE(Confirmations(*sessions_[w0], seen).empty());

  ASSERT_TRUE(store_->Flush().ok());
  seen = sessions_[w0]->messages.size();
  Heartbeat(w0);
  std::vector<v1::ReportsStored> stored = Confirmations(*sessions_[w0], seen);
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_EQ(stored[0].job_id(), id);
  EXPECT_EQ(stored[0].attempt(), 1);
  EXPECT_EQ(stored[0].through_step(), 3);
  // Confirmed once: the next ack carries nothing for them.
  seen = sessions_[w0]->messages.size();
  Heartbeat(w0);
  EXPECT_TRUE(Confirmations(*sessions_[w0], seen).empty());

  // A resent report is stored again (idempotent) and confirmed again; one for an attempt that
  // is not running is not stored, and is confirmed so the worker drops it.
  Step(w0, id, 1, 0, 2, 5.0, 100);
  Step(w0, id, 7, 0, 9, 5.0, 100);
  ASSERT_TRUE(store_->Flush().ok());
  seen = sessions_[w0]->messages.size();
  Heartbeat(w0);
  stored = Confirmations(*sessions_[w0], seen);
  ASSERT_EQ(stored.size(), 2u);
  EXPECT_EQ(stored[0].attempt(), 1);
  EXPECT_EQ(stored[0].through_step(), 2);
  EXPECT_EQ(stored[1].attempt(), 7);
  EXPECT_EQ(stored[1].through_step(), 9);
  absl::StatusOr<std::vector<v1::StepReport>> rows = store_->LoadStepReports(id);
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(rows->size(), 6u) << "one row per rank and step, however often it arrived";

  // The other worker's reports are confirmed on its own acks.
  seen = sessions_[w1]->messages.size();
  Heartbeat(w1);
  stored = Confirmations(*sessions_[w1], seen);
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_EQ(stored[0].through_step(), 3);
}

// What a watcher is told is already what Get says: events of a run of worker messages reach
// subscribers only once the run is committed and published.
TEST_F(JobManagerTest, WatchersHearOfAChangeOnlyOnceGetShowsIt) {
  class GetOnEnd : public FakeSubscriber {
   public:
    GetOnEnd(JobManager& jobs, std::string id) : jobs_(jobs), id_(std::move(id)) {}
    void OnEvent(const v1::JobEvent& event) override {
      FakeSubscriber::OnEvent(event);
      if (event.has_state()) seen_by_get.push_back(jobs_.Get(id_)->state());
    }
    std::vector<v1::JobState> seen_by_get;

   private:
    JobManager& jobs_;
    std::string id_;
  };
  const std::string w0 = AddWorker("host-a", 0);
  const std::string id = *jobs_->Submit(SmallSpec(1, 0));
  auto watcher = std::make_shared<GetOnEnd>(*jobs_, id);
  ASSERT_TRUE(jobs_->Watch(id, watcher).ok());
  Step(w0, id, 1, 0, 1, 5.0, 100);
  Result(w0, id, 1, 0, true);
  ASSERT_EQ(watcher->events.size(), 3u);
  EXPECT_EQ(watcher->events[2].state().state(), v1::SUCCEEDED);
  EXPECT_THAT(watcher->seen_by_get, ::testing::ElementsAre(v1::RUNNING, v1::SUCCEEDED));
}

TEST_F(JobManagerTest, RankErrorRetriesAndFailsAfterMaxRestarts) {
  const std::string w0 = AddWorker("host-a", 0);
  const std::string w1 = AddWorker("host-a", 1);
  const std::string id = *jobs_->Submit(SmallSpec(2, /*max_restarts=*/1));
  Step(w0, id, 1, 0, 1, 5.0, 10);

  Result(w1, id, 1, 1, false, "out of memory in layer 3");
  v1::Job job = GetJob(id);
  EXPECT_EQ(job.state(), v1::RETRYING);
  EXPECT_THAT(job.reason(), HasSubstr("out of memory in layer 3"));
  EXPECT_EQ(sessions_[w0]->Cancellations(), 1);
  // Rank 0 is busy until it confirms the cancellation; then attempt 2 starts on both.
  EXPECT_EQ(StateOf(w0), v1::BUSY);
  EXPECT_FALSE(rendezvous_->HasScope(id, 1));
  Result(w0, id, 1, 0, false, "", /*cancelled=*/true);
  job = GetJob(id);
  EXPECT_EQ(job.state(), v1::SCHEDULED);
  EXPECT_EQ(job.attempt(), 2);
  EXPECT_EQ(sessions_[w0]->Assignments().back().attempt(), 2);

  Result(w0, id, 2, 0, false, "NaN loss at step 4");
  job = GetJob(id);
  EXPECT_EQ(job.state(), v1::FAILED);
  EXPECT_THAT(job.reason(), HasSubstr("NaN loss at step 4"));
}

// Rank 0's model upload is bounded by what the spec's model can take in fp32, and a job has no
// other artifact: a larger upload (a rogue or broken worker, or a sparse write far past the end)
// or another file name fails the attempt with the reason, and nothing of it stays on disk.
TEST_F(JobManagerTest, AModelUploadLargerThanTheSpecAllowsFailsTheAttempt) {
  const std::string w0 = AddWorker("host-a", 0);
  const v1::JobSpec spec = SmallSpec(1, /*max_restarts=*/3);
  const std::string id = *jobs_->Submit(spec);
  const int64_t limit = ExportedModelBytesLimit(GetJob(id).spec().model());
  ASSERT_GT(limit, 4 * ParameterCount(spec.model()));
  const std::string artifact_dir = directory_ + "/artifacts/" + id;
  auto upload = [&](int attempt, int64_t offset, int64_t size, bool last,
                    const std::string& name = "model.safetensors") {
    v1::WorkerMessage message;
    v1::ArtifactChunk* chunk = message.mutable_artifact();
    chunk->set_job_id(id);
    chunk->set_attempt(attempt);
    chunk->set_name(name);
    chunk->mutable_chunk()->set_offset(offset);
    chunk->mutable_chunk()->set_data(std::string(static_cast<size_t>(size), 'w'));
    chunk->set_last(last);
    jobs_->OnWorkerMessage(w0, message);
  };
  auto expect_refused = [&](int attempt, const std::string& why) {
    const v1::Job job = GetJob(id);
    EXPECT_EQ(job.state(), v1::RETRYING);
    EXPECT_EQ(job.attempt(), attempt);
    EXPECT_THAT(job.reason(), HasSubstr("model upload failed"));
    EXPECT_THAT(job.reason(), HasSubstr(why));
    EXPECT_FALSE(std::filesystem::exists(artifact_dir + "/model.safetensors.partial"));
    EXPECT_FALSE(std::filesystem::exists(artifact_dir + "/model.safetensors"));
    EXPECT_EQ(sessions_[w0]->Cancellations(), attempt);
    Result(w0, id, attempt, 0, false, "", /*cancelled=*/true);
  };

  // A chunk that ends 90 bytes past the limit.
  upload(1, 0, 1000, false);
  EXPECT_TRUE(std::filesystem::exists(artifact_dir + "/model.safetensors.partial"));
  upload(1, limit - 10, 100, false);
  expect_refused(1, absl::StrCat("past the ", limit, " bytes"));
  // A chunk far out, where offset + size would overflow: refused, not a sparse file.
  upload(2, std::numeric_limits<int64_t>::max() - 10, 100, false);
  expect_refused(2, absl::StrCat("past the ", limit, " bytes"));
  // Another file beside the model.
  upload(3, 0, 100, true, "notes.txt");
  expect_refused(3, "is not model.safetensors");
  EXPECT_FALSE(std::filesystem::exists(artifact_dir + "/notes.txt"));

  // The next attempt uploads a model exactly at the limit, which is stored.
  ASSERT_EQ(GetJob(id).attempt(), 4);
  upload(4, 0, limit, true);
  Result(w0, id, 4, 0, true);
  EXPECT_EQ(GetJob(id).state(), v1::SUCCEEDED);
  EXPECT_EQ(static_cast<int64_t>(std::filesystem::file_size(artifact_dir + "/model.safetensors")),
            limit);
}

TEST_F(JobManagerTest, CancelStopsRanksAndFreesWorkersWhenTheyReport) {
  const std::string w0 = AddWorker("host-a", 0);
  const std::string pending_id = *jobs_->Submit(SmallSpec(2, 0));  // cannot be placed yet
  EXPECT_EQ(GetJob(pending_id).state(), v1::PENDING);
  absl::StatusOr<v1::Job> cancelled = jobs_->Cancel(pending_id, "");
  ASSERT_TRUE(cancelled.ok());
  EXPECT_EQ(cancelled->state(), v1::CANCELLED);

  const std::string id = *jobs_->Submit(SmallSpec(1, 3));
  EXPECT_EQ(GetJob(id).state(), v1::SCHEDULED);
  cancelled = jobs_->Cancel(id, "wrong learning rate");
  ASSERT_TRUE(cancelled.ok());
  EXPECT_EQ(cancelled->state(), v1::CANCELLED);
  EXPECT_EQ(cancelled->reason(), "wrong learning rate");
  EXPECT_EQ(sessions_[w0]->Cancellations(), 1);
  EXPECT_EQ(StateOf(w0), v1::BUSY);
  Result(w0, id, 1, 0, false, "", true);
  EXPECT_EQ(StateOf(w0), v1::IDLE);
  EXPECT_EQ(GetJob(id).state(), v1::CANCELLED);  // a late result changes nothing

  EXPECT_EQ(jobs_->Cancel("job-999999", "").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(JobManagerTest, SilentWorkerIsLostAndItsAttemptRetries) {
  const std::string w0 = AddWorker("host-a", 0);
  const std::string w1 = AddWorker("host-b", 0);
  const std::string id = *jobs_->Submit(SmallSpec(2, 2));
  Step(w0, id, 1, 0, 1, 5.0, 10);

  now_ += std::chrono::seconds(6);
  Heartbeat(w0);
  jobs_->Tick();
  EXPECT_EQ(GetJob(id).state(), v1::RUNNING);  // within the 10 s timeout
  now_ += std::chrono::seconds(6);
  Heartbeat(w0);
  jobs_->Tick();
  EXPECT_EQ(StateOf(w1), v1::LOST);
  v1::Job job = GetJob(id);
  EXPECT_EQ(job.state(), v1::RETRYING);
  EXPECT_THAT(job.reason(), HasSubstr("worker " + w1 + " lost"));
  EXPECT_EQ(sessions_[w0]->Cancellations(), 1);
}

TEST_F(JobManagerTest, RunningAttemptSurvivesACoordinatorRestartWhenAllRanksReturn) {
  std::string w0 = AddWorker("host-a", 0);
  std::string w1 = AddWorker("host-a", 1);
  const std::string id = *jobs_->Submit(SmallSpec(2, 0));
  Step(w0, id, 1, 0, 1, 5.0, 10);
  Step(w1, id, 1, 1, 1, 5.0, 10);
  Restart();

  EXPECT_EQ(GetJob(id).state(), v1::RUNNING);
  EXPECT_EQ(GetJob(id).step(), 1);
  AddWorker("host-a", 0, w0, {id, 1, 0});
  AddWorker("host-a", 1, w1, {id, 1, 1});
  EXPECT_EQ(StateOf(w0), v1::BUSY);
  now_ += std::chrono::seconds(11);
  Heartbeat(w0);
  Heartbeat(w1);
  jobs_->Tick();
  EXPECT_EQ(GetJob(id).state(), v1::RUNNING);
  Step(w0, id, 1, 0, 2, 4.0, 10);
  Step(w1, id, 1, 1, 2, 4.0, 10);
  EXPECT_EQ(GetJob(id).step(), 2);
  Result(w0, id, 1, 0, true);
  Result(w1, id, 1, 1, true);
  EXPECT_EQ(GetJob(id).state(), v1::SUCCEEDED);
}

TEST_F(JobManagerTest, AttemptFailsWhenARankDoesNotReturnAfterRestart) {
  std::string w0 = AddWorker("host-a", 0);
  std::string w1 = AddWorker("host-a", 1);
  const std::string id = *jobs_->Submit(SmallSpec(2, 1));
  Step(w0, id, 1, 0, 1, 5.0, 10);
  Restart();

  AddWorker("host-a", 0, w0, {id, 1, 0});
  now_ += std::chrono::seconds(5);
  jobs_->Tick();
  EXPECT_EQ(GetJob(id).state(), v1::RUNNING);
  now_ += std::chrono::seconds(6);
  Heartbeat(w0);
  jobs_->Tick();
  v1::Job job = GetJob(id);
  EXPECT_EQ(job.state(), v1::RETRYING);
  EXPECT_THAT(job.reason(), HasSubstr(w1));
  EXPECT_EQ(sessions_[w0]->Cancellations(), 1);
}

TEST_F(JobManagerTest, RankThatFinishedWhileTheCoordinatorWasAwayCountsAsBack) {
  std::string w0 = AddWorker("host-a", 0);
  std::string w1 = AddWorker("host-a", 1);
  const std::string id = *jobs_->Submit(SmallSpec(2, 0));
  Step(w0, id, 1, 0, 1, 5.0, 10);
  Restart();

  AddWorker("host-a", 0, w0, {id, 1, 0});
  AddWorker("host-a", 1, w1);  // its rank ended; it delivers the buffered result
  Result(w1, id, 1, 1, true);
  now_ += std::chrono::seconds(11);
  Heartbeat(w0);
  Heartbeat(w1);
  jobs_->Tick();
  EXPECT_EQ(GetJob(id).state(), v1::RUNNING);
  Result(w0, id, 1, 0, true);
  EXPECT_EQ(GetJob(id).state(), v1::SUCCEEDED);
}

TEST_F(JobManagerTest, LostWorkersAreForgottenAfterTheRetention) {
  const std::string w0 = AddWorker("host-a", 0);
  jobs_->CloseSession(w0, sessions_[w0].get());
  now_ += std::chrono::seconds(11);
  jobs_->Tick();
  EXPECT_EQ(StateOf(w0), v1::LOST);
  now_ += std::chrono::minutes(30);
  jobs_->Tick();
  EXPECT_TRUE(registry_->Find(w0).has_value());  // alerts still see it
  now_ += std::chrono::hours(2);
  jobs_->Tick();
  EXPECT_FALSE(registry_->Find(w0).has_value());
}

TEST_F(JobManagerTest, WorkerThatReconnectsInTimeKeepsItsRank) {
  const std::string w0 = AddWorker("host-a", 0);
  const std::string w1 = AddWorker("host-a", 1);
  const std::string id = *jobs_->Submit(SmallSpec(2, 1));
  Step(w0, id, 1, 0, 1, 5.0, 10);

  // w0's stream breaks; it comes back within the timeout, still running rank 0.
  jobs_->CloseSession(w0, sessions_[w0].get());
  now_ += std::chrono::seconds(4);
  Heartbeat(w1);
  jobs_->Tick();
  AddWorker("host-a", 0, w0, {id, 1, 0});
  now_ += std::chrono::seconds(8);
  Heartbeat(w0);
  Heartbeat(w1);
  jobs_->Tick();
  EXPECT_EQ(GetJob(id).state(), v1::RUNNING);
  EXPECT_EQ(StateOf(w0), v1::BUSY);

  // w1's process restarts (its stream ends with it) and registers with nothing running: its
  // rank is gone. While its old session was live the id could not have been registered again.
  jobs_->CloseSession(w1, sessions_[w1].get());
  AddWorker("host-a", 1, w1);
  v1::Job job = GetJob(id);
  EXPECT_EQ(job.state(), v1::RETRYING);
  EXPECT_THAT(job.reason(), HasSubstr("restarted"));
}

TEST_F(JobManagerTest, WorkStaleAtRegistrationIsCancelledAndTheWorkerFreedAfterward) {
  const std::string id = *jobs_->Submit(SmallSpec(1, 0));
  ASSERT_TRUE(jobs_->Cancel(id, "").ok());
  // A worker comes back still running attempt 1 of a job that has since ended.
  const std::string worker = AddWorker("host-a", 0, "worker-stale", {id, 1, 0});
  EXPECT_EQ(sessions_[worker]->Cancellations(), 1);
  EXPECT_EQ(StateOf(worker), v1::BUSY);
  const std::string next = *jobs_->Submit(SmallSpec(1, 0));
  EXPECT_EQ(GetJob(next).state(), v1::PENDING);  // the worker is not free yet
  Result(worker, id, 1, 0, false, "", true);
  EXPECT_EQ(StateOf(worker), v1::BUSY);  // and now runs the next job
  EXPECT_EQ(GetJob(next).state(), v1::SCHEDULED);
}

TEST_F(JobManagerTest, ShutdownFlushesAndClosesWithoutTouchingJobs) {
  const std::string w0 = AddWorker("host-a", 0);
  const std::string id = *jobs_->Submit(SmallSpec(1, 0));
  Step(w0, id, 1, 0, 1, 5.0, 10);
  v1::WorkerMessage message;
  message.mutable_log()->set_job_id(id);
  message.mutable_log()->set_text("buffered line");
  jobs_->OnWorkerMessage(w0, message);
  auto watcher = std::make_shared<FakeSubscriber>();
  ASSERT_TRUE(jobs_->Watch(id, watcher).ok());

  jobs_->Shutdown();
  ASSERT_TRUE(sessions_[w0]->closed.has_value());
  EXPECT_EQ(sessions_[w0]->closed->code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(sessions_[w0]->Cancellations(), 0);
  ASSERT_TRUE(watcher->ended.has_value());
  EXPECT_EQ(watcher->ended->code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(GetJob(id).state(), v1::RUNNING);
  EXPECT_EQ(jobs_->Submit(SmallSpec(1, 0)).status().code(), absl::StatusCode::kUnavailable);

  // Another connection (a later coordinator) sees the buffered rows.
  JobStoreConfig config;
  config.database_path = directory_ + "/fsdpd.db";
  std::unique_ptr<SqliteJobStore> reader = std::move(*SqliteJobStore::Open(config));
  EXPECT_EQ(reader->LoadLogs(id, 0)->size(), 1u);
  EXPECT_EQ(reader->LoadStepReports(id)->size(), 1u);
  EXPECT_EQ(reader->LoadJobs()->front().state(), v1::RUNNING);
}

TEST_F(JobManagerTest, LogsAreStoredAndFollowed) {
  const std::string w0 = AddWorker("host-a", 0);
  const std::string id = *jobs_->Submit(SmallSpec(1, 0));
  v1::WorkerMessage message;
  message.mutable_log()->set_job_id(id);
  message.mutable_log()->set_attempt(1);
  message.mutable_log()->set_text("building the model");
  jobs_->OnWorkerMessage(w0, message);

  auto follower = std::make_shared<FakeSubscriber>();
  absl::StatusOr<JobManager::History> history = jobs_->Logs(id, 0, follower);
  ASSERT_TRUE(history.ok());
  ASSERT_EQ(history->logs.size(), 1u);
  EXPECT_EQ(history->logs[0].text(), "building the model");
  EXPECT_FALSE(history->ended);
  message.mutable_log()->set_text("step 1");
  jobs_->OnWorkerMessage(w0, message);
  ASSERT_EQ(follower->logs.size(), 1u);
  EXPECT_EQ(follower->logs[0].text(), "step 1");
  Result(w0, id, 1, 0, true);
  ASSERT_TRUE(follower->ended.has_value());
}

// A damaged page of the log table (a torn write, a bad disk) makes `fsdpctl logs` say what is
// damaged, not a raw SQL error, and the job's state and history keep answering. The coordinator
// still starts with a running job whose stored log cannot be counted for its budget.
TEST_F(JobManagerTest, DamagedLogPagesAreNamedAndTheRestStaysReadable) {
  const std::string w0 = AddWorker("host-a", 0);
  const std::string id = *jobs_->Submit(SmallSpec(1, 0));
  const std::string w1 = AddWorker("host-a", 1);
  const std::string running = *jobs_->Submit(SmallSpec(1, 0));
  ASSERT_EQ(sessions_[w1]->Assignments().size(), 1u);
  Step(w1, running, 1, 0, 1, 5.0, 100);
  for (int i = 0; i < 200; ++i) SendLog(w0, id, 0, std::string(200, 'x'));  // several pages
  SendLog(w1, running, 0, std::string(200, 'x'));
  Result(w0, id, 1, 0, true);
  ASSERT_TRUE(jobs_->Logs(id, 0, nullptr).ok());
  Stop();
  {
    // Overwrites the log table's root page with garbage, as a torn write would leave it.
    sqlite3* database = nullptr;
    ASSERT_EQ(sqlite3_open((directory_ + "/fsdpd.db").c_str(), &database), SQLITE_OK);
    sqlite3_stmt* query = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(database, "SELECT rootpage FROM sqlite_master WHERE name = 'logs'",
                                 -1, &query, nullptr),
              SQLITE_OK);
    ASSERT_EQ(sqlite3_step(query), SQLITE_ROW);
    const int64_t root_page = sqlite3_column_int64(query, 0);
    sqlite3_finalize(query);
    ASSERT_EQ(sqlite3_exec(database, "PRAGMA wal_checkpoint(TRUNCATE)", nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(database);
    std::fstream file(directory_ + "/fsdpd.db", std::ios::in | std::ios::out | std::ios::binary);
    constexpr int64_t kPageSize = 4096;  // SQLite's default
    file.seekp((root_page - 1) * kPageSize);
    const std::string garbage(kPageSize, '\x5a');
    file.write(garbage.data(), garbage.size());
  }
  Start();
  absl::StatusOr<JobManager::History> logs = jobs_->Logs(id, 0, nullptr);
  ASSERT_FALSE(logs.ok());
  EXPECT_EQ(logs.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(logs.status().message()),
              HasSubstr("the stored log lines of job " + id + " are damaged"));
  absl::StatusOr<v1::Job> job = jobs_->Get(id);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), v1::SUCCEEDED);
  absl::StatusOr<JobManager::History> history = jobs_->Watch(id, nullptr);
  ASSERT_TRUE(history.ok()) << history.status();
  EXPECT_FALSE(history->events.empty());
  EXPECT_EQ(GetJob(running).state(), v1::RUNNING);
}

// Numbered log lines are confirmed like step reports, stored once, and a resent one is not
// shown to followers again.
TEST_F(JobManagerTest, NumberedLogLinesAreConfirmedStoredOnceAndFollowedOnce) {
  const std::string w0 = AddWorker("host-a", 0);
  const std::string id = *jobs_->Submit(SmallSpec(1, 0));
  auto follower = std::make_shared<FakeSubscriber>();
  ASSERT_TRUE(jobs_->Logs(id, 0, follower).ok());
  SendLog(w0, id, 1, "first");
  SendLog(w0, id, 2, "second");
  Step(w0, id, 1, 0, 1, 5.0, 100);
  SendLog(w0, id, 2, "second");  // resent after a reconnect
  ASSERT_EQ(follower->logs.size(), 2u);
  EXPECT_EQ(follower->logs[1].text(), "second");

  size_t seen = sessions_[w0]->messages.size();
  Heartbeat(w0);
  EXPECT_TRUE(Confirmations(*sessions_[w0], seen).empty()) << "nothing is written yet";
  ASSERT_TRUE(store_->Flush().ok());
  seen = sessions_[w0]->messages.size();
  Heartbeat(w0);
  const std::vector<v1::ReportsStored> stored = Confirmations(*sessions_[w0], seen);
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_EQ(stored[0].through_log_sequence(), 2);
  EXPECT_EQ(stored[0].through_step(), 1);

  absl::StatusOr<std::vector<v1::LogLine>> lines = store_->LoadLogs(id, 0);
  ASSERT_TRUE(lines.ok()) << lines.status();
  ASSERT_EQ(lines->size(), 2u) << "the resent line is stored once";
  EXPECT_EQ((*lines)[0].text(), "first");
  EXPECT_EQ((*lines)[1].text(), "second");
}

// A job's stored log text is bounded: past --max-log-bytes-per-job one marker line says so,
// later lines are dropped but still confirmed (the worker forgets them), and a restarted
// coordinator counts what is already stored.
TEST_F(JobManagerTest, LogLinesPastTheJobsBudgetAreDroppedAfterOneMarker) {
  max_log_bytes_ = 1000;
  Restart();
  const std::string w0 = AddWorker("host-a", 0);
  const std::string id = *jobs_->Submit(SmallSpec(1, 0));
  auto follower = std::make_shared<FakeSubscriber>();
  ASSERT_TRUE(jobs_->Logs(id, 0, follower).ok());
  for (int sequence = 1; sequence <= 5; ++sequence) {
    SendLog(w0, id, sequence, std::string(400, static_cast<char>('a' + sequence)));
  }
  ASSERT_TRUE(store_->Flush().ok());
  size_t seen = sessions_[w0]->messages.size();
  Heartbeat(w0);
  const std::vector<v1::ReportsStored> stored = Confirmations(*sessions_[w0], seen);
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_EQ(stored[0].through_log_sequence(), 5) << "dropped lines are confirmed too";

  auto texts = [&] {
    std::vector<std::string> found;
    absl::StatusOr<std::vector<v1::LogLine>> lines = store_->LoadLogs(id, 0);
    EXPECT_TRUE(lines.ok()) << lines.status();
    if (lines.ok()) {
      for (const v1::LogLine& line : *lines) found.push_back(line.text().substr(0, 40));
    }
    return found;
  };
  const std::string marker =
      "fsdpd: this job's stored log reached --max-log-bytes-per-job (1000 bytes)";
  std::vector<std::string> lines = texts();
  ASSERT_EQ(lines.size(), 3u);  // 2 × 400 bytes fit in 1000, then the marker
  EXPECT_EQ(lines[0], std::string(40, 'b'));
  EXPECT_EQ(lines[1], std::string(40, 'c'));
  EXPECT_EQ(lines[2], marker.substr(0, 40));
  ASSERT_EQ(follower->logs.size(), 3u);
  EXPECT_THAT(follower->logs[2].text(), HasSubstr(marker));
  EXPECT_EQ(follower->logs[2].level(), "warning");

  // A restarted coordinator counts the 800 bytes already stored: 100 more fit, 400 do not.
  Restart();
  const std::string again = AddWorker("host-a", 0, w0, RankAssignment{id, 1, 0});
  SendLog(again, id, 6, std::string(100, 'y'));
  SendLog(again, id, 7, std::string(400, 'x'));
  lines = texts();
  EXPECT_EQ(std::count(lines.begin(), lines.end(), std::string(40, 'y')), 1);
  EXPECT_EQ(std::count(lines.begin(), lines.end(), std::string(40, 'x')), 0);
}

// Issue 11 §1: a job's unique id survives restarts and differs between state folders.
TEST_F(JobManagerTest, JobsHaveUniqueIdsThatAssignmentsCarryAndRestartsKeep) {
  const std::string w0 = AddWorker("host-a", 0);
  const std::string id = *jobs_->Submit(SmallSpec(1, 0));
  const std::string uid = GetJob(id).uid();
  EXPECT_EQ(uid.size(), 36u) << uid;
  EXPECT_EQ(sessions_[w0]->Assignments().front().job_uid(), uid);
  const std::string second = *jobs_->Submit(SmallSpec(1, 0));
  EXPECT_NE(GetJob(second).uid(), uid);
  Restart();
  EXPECT_EQ(GetJob(id).uid(), uid);

  // A new state folder starts again at job-000001, under a new unique id.
  Stop();
  std::filesystem::remove_all(directory_);
  std::filesystem::create_directories(directory_);
  Start();
  const std::string again = *jobs_->Submit(SmallSpec(1, 0));
  EXPECT_EQ(again, id);
  EXPECT_NE(GetJob(again).uid(), uid);
}

// A worker that outlived an older coordinator may still send reports of the older job with the
// same display id: they do not count for the new one.
TEST_F(JobManagerTest, ReportsOfAnOlderJobWithTheSameDisplayIdAreIgnored) {
  const std::string w0 = AddWorker("host-a", 0);
  const std::string id = *jobs_->Submit(SmallSpec(1, 0));
  v1::WorkerMessage message;
  v1::AttemptResult* result = message.mutable_result();
  result->set_job_id(id);
  result->set_job_uid("0c1d7a52-0000-4000-8000-000000000000");
  result->set_attempt(1);
  result->set_ok(true);
  result->set_final_step(400);
  jobs_->OnWorkerMessage(w0, message);
  EXPECT_EQ(GetJob(id).state(), v1::SCHEDULED) << GetJob(id).reason();
  result->set_job_uid(GetJob(id).uid());
  jobs_->OnWorkerMessage(w0, message);
  EXPECT_EQ(GetJob(id).state(), v1::SUCCEEDED);
}

// SCHEDULED has a deadline: a rank that never accepts fails the attempt, which is retried.
TEST_F(JobManagerTest, AttemptWhoseRanksDoNotAcceptInTimeFailsAndRetries) {
  const std::string w0 = AddWorker("host-a", 0);
  const std::string w1 = AddWorker("host-a", 1);
  const std::string id = *jobs_->Submit(SmallSpec(2, 1));
  const std::string uid = GetJob(id).uid();
  v1::WorkerMessage message;
  v1::AssignmentAccepted* accepted = message.mutable_accepted();
  accepted->set_job_id(id);
  accepted->set_job_uid(uid);
  accepted->set_attempt(1);
  accepted->set_rank(0);
  jobs_->OnWorkerMessage(w0, message);
  // Both keep beating, so neither is lost; only rank 1's acceptance is missing.
  const auto timeout =
      WorkerRegistryConfig{}.heartbeat_timeout + RendezvousConfig{}.default_get_timeout;
  for (auto waited = std::chrono::milliseconds(0); waited < timeout;
       waited += std::chrono::seconds(5)) {
    EXPECT_EQ(GetJob(id).state(), v1::SCHEDULED);
    now_ += std::chrono::seconds(5);
    Heartbeat(w0);
    Heartbeat(w1);
    jobs_->Tick();
  }
  v1::Job job = GetJob(id);
  EXPECT_EQ(job.state(), v1::RETRYING);
  EXPECT_THAT(job.reason(), HasSubstr("rank 1 (worker " + w1 + ") did not accept"));
  Result(w0, id, 1, 0, false, "", true);
  Result(w1, id, 1, 1, false, "", true);
  EXPECT_EQ(GetJob(id).attempt(), 2);
  EXPECT_EQ(GetJob(id).state(), v1::SCHEDULED);
  // Acceptance by every rank clears the deadline.
  accepted->set_attempt(2);
  jobs_->OnWorkerMessage(w0, message);
  accepted->set_rank(1);
  jobs_->OnWorkerMessage(w1, message);
  now_ += timeout * 2;
  Heartbeat(w0);
  Heartbeat(w1);
  jobs_->Tick();
  EXPECT_EQ(GetJob(id).state(), v1::SCHEDULED);
}

// Issue 11 §3: bad input fails at once; a crash is retried.
TEST_F(JobManagerTest, PermanentFailureIsNotRetried) {
  const std::string w0 = AddWorker("host-a", 0);
  const std::string id = *jobs_->Submit(SmallSpec(1, 3));
  v1::WorkerMessage message;
  v1::AttemptResult* result = message.mutable_result();
  result->set_job_id(id);
  result->set_attempt(1);
  result->set_error("data.path: /data/missing.bin: no such file");
  result->set_permanent(true);
  jobs_->OnWorkerMessage(w0, message);
  v1::Job job = GetJob(id);
  EXPECT_EQ(job.state(), v1::FAILED);
  EXPECT_EQ(job.attempt(), 1);
  EXPECT_THAT(job.reason(), HasSubstr("missing.bin"));
  EXPECT_THAT(job.reason(), HasSubstr("not retried"));

  const std::string crashed = *jobs_->Submit(SmallSpec(1, 3));
  Result(w0, crashed, 1, 0, false, "the trainer threw: bad_alloc");
  EXPECT_EQ(GetJob(crashed).state(), v1::SCHEDULED);
  EXPECT_EQ(GetJob(crashed).attempt(), 2);
}

// Issue 11 §2: a store that cannot write (SQLITE_FULL, injected with PRAGMA max_page_count)
// never splits memory from disk. What failed is held, submits get UNAVAILABLE, and once space
// is back the held reports are stored in order and the history is whole, with no restart.
TEST_F(JobManagerTest, FullStoreHoldsChangesUntilItWritesAgainAndLosesNothing) {
  const std::string w0 = AddWorker("host-a", 0);
  const std::string id = *jobs_->Submit(SmallSpec(1, 0));
  Step(w0, id, 1, 0, 1, 5.0, 10);
  ASSERT_TRUE(jobs_->GetStoreHealth().writable);

  absl::StatusOr<int64_t> pages = store_->LimitPages(0);
  ASSERT_TRUE(pages.ok()) << pages.status();
  ASSERT_TRUE(store_->LimitPages(*pages).ok());
  int step = 1;
  while (jobs_->GetStoreHealth().writable && step < 2000) {
    ++step;
    Step(w0, id, 1, 0, step, 5.0 - step * 0.001, 10);
  }
  ASSERT_FALSE(jobs_->GetStoreHealth().writable) << "the page limit never made a write fail";
  const int64_t stored_step = GetJob(id).step();
  EXPECT_EQ(stored_step, step - 1) << "the step whose write failed is not shown";
  for (int more = 0; more < 5; ++more) Step(w0, id, 1, 0, ++step, 4.0, 10);
  Result(w0, id, 1, 0, true);
  jobs_->Tick();  // still full: nothing moves
  const JobManager::StoreHealth failing = jobs_->GetStoreHealth();
  EXPECT_FALSE(failing.writable);
  EXPECT_GE(failing.errors, 1);
  EXPECT_GT(failing.held_messages, 0);
  EXPECT_FALSE(failing.last_error.empty());
  v1::Job job = GetJob(id);
  EXPECT_EQ(job.state(), v1::RUNNING) << "SUCCEEDED was not stored, so it is not shown";
  EXPECT_EQ(job.step(), stored_step);
  absl::StatusOr<std::string> refused = jobs_->Submit(SmallSpec(1, 0));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable) << refused.status();
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("job store cannot write"));
  EXPECT_EQ(jobs_->Cancel(id, "").status().code(), absl::StatusCode::kUnavailable);
  absl::StatusOr<std::vector<StoredEvent>> events = store_->LoadEvents(id);
  ASSERT_TRUE(events.ok()) << events.status();
  EXPECT_EQ(events->back().event.step().step(), stored_step) << "memory matches the disk";

  ASSERT_TRUE(store_->LimitPages(int64_t{1} << 30).ok());
  jobs_->Tick();
  EXPECT_TRUE(jobs_->GetStoreHealth().writable);
  EXPECT_EQ(jobs_->GetStoreHealth().held_messages, 0);
  job = GetJob(id);
  EXPECT_EQ(job.state(), v1::SUCCEEDED) << job.reason();
  EXPECT_EQ(job.step(), step);
  EXPECT_EQ(job.attempt(), 1);
  // The history is whole: every step once, in order, then SUCCEEDED.
  events = store_->LoadEvents(id);
  ASSERT_TRUE(events.ok()) << events.status();
  std::vector<int64_t> steps;
  for (const StoredEvent& event : *events) {
    if (event.event.has_step()) steps.push_back(event.event.step().step());
  }
  ASSERT_EQ(steps.size(), static_cast<size_t>(step));
  for (int i = 0; i < step; ++i) EXPECT_EQ(steps[i], i + 1);
  EXPECT_EQ(events->back().event.state().state(), v1::SUCCEEDED);
  Restart();
  EXPECT_EQ(GetJob(id).state(), v1::SUCCEEDED);
  EXPECT_EQ(GetJob(id).attempt(), 1);
  EXPECT_TRUE(jobs_->Submit(SmallSpec(1, 0)).ok());
}

}  // namespace
}  // namespace fsdpd::server
