// Faults injected into real processes on loopback: a worker killed mid-job, a checkpoint that
// cannot be written, a corrupted checkpoint, and a job that keeps failing. Each test drives a
// coordinator (heartbeat timeout 5 s) and its own fsdpd-worker processes, so it can kill one.
// The coordinator killed mid-job is covered by coordinator_restart_test.cc.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "tests/integration/process_harness.h"
#include "worker/checkpoint/checkpoint.h"

namespace fsdpd::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

// The coordinator's --heartbeat-timeout in Cluster::StartCoordinator.
constexpr seconds kHeartbeatTimeout{5};

struct FaultSpec {
  int64_t steps = 400;
  int64_t checkpoint_every = 100;
  int keep = 3;
  int max_restarts = 1;
  std::string data = "{source: synthetic, seq_len: 16}";
};

std::string SpecYaml(const std::string& name, const FaultSpec& spec) {
  std::ostringstream yaml;
  yaml << "name: " << name << "\n"
       << "model: {vocab: 64, dim: 32, layers: 1, heads: 2, ffn_mult: 2}\n"
       << "data: " << spec.data << "\n"
       << "train: {batch_size: 2, steps: " << spec.steps << ", lr: 1.0e-3, seed: 7}\n"
       << "parallel: {world_size: 2, device: cpu, param_dtype: fp32, reduce_dtype: fp32}\n"
       << "checkpoint: {every_steps: " << spec.checkpoint_every << ", keep: " << spec.keep << "}\n"
       << "profile: {steps: 0}\n"
       << "max_restarts: " << spec.max_restarts << "\n";
  return yaml.str();
}

std::vector<std::string> StatesOf(const nlohmann::json& status) {
  std::vector<std::string> states;
  if (!status.contains("transitions")) return states;
  for (const auto& change : status["transitions"]) states.push_back(change.value("state", ""));
  return states;
}

int CountOf(const std::vector<std::string>& states, const std::string& state) {
  return static_cast<int>(std::count(states.begin(), states.end(), state));
}

class FaultToleranceTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(cluster_.StartCoordinator()); }
  void TearDown() override {
    if (HasFailure()) std::cerr << cluster_.Logs();
  }

  // Starts worker `index` (hostname fault-worker-<index>), as Cluster::StartWorkers does.
  void StartWorker(int index) {
    if (workers_.size() <= static_cast<size_t>(index)) workers_.resize(index + 1);
    const std::string log = cluster_.dir() + "/worker" + std::to_string(index) + "." +
                            std::to_string(++worker_starts_) + ".log";
    workers_[index] = std::make_unique<ChildProcess>(
        std::vector<std::string>{BuildPath("worker/fsdpd-worker"), "--coordinator",
                                 cluster_.address(), "--device", "cpu", "--checkpoint-root",
                                 CheckpointRoot(), "--hostname", Hostname(index),
                                 "--heartbeat-interval", "500ms", "--allowed-root", cluster_.dir()},
        log);
  }
  static std::string Hostname(int index) { return "fault-worker-" + std::to_string(index); }
  std::string CheckpointRoot() const { return cluster_.dir() + "/checkpoints"; }
  // Checkpoints live under the job's unique id (fsdpctl shows it as "uid").
  std::string JobDir(const std::string& job_id) {
    std::string& uid = uids_[job_id];
    if (uid.empty()) uid = cluster_.Status(job_id).value("uid", "");
    EXPECT_FALSE(uid.empty()) << "fsdpctl status " << job_id << " shows no uid";
    return CheckpointRoot() + "/" + uid;
  }
  std::map<std::string, std::string> uids_;

  // The index of the worker process that runs `rank` of `job_id`, or -1.
  int WorkerRunning(const std::string& job_id, int rank) {
    nlohmann::json listed = cluster_.CtlJson({"workers"});
    if (listed.is_null()) return -1;
    for (const auto& worker : listed["workers"]) {
      if (worker.value("job_id", "") != job_id || worker.value("rank", -1) != rank) continue;
      for (size_t index = 0; index < workers_.size(); ++index) {
        if (worker.value("hostname", "") == Hostname(static_cast<int>(index))) {
          return static_cast<int>(index);
        }
      }
    }
    return -1;
  }
  // Waits up to 30 s for a worker to run `rank` of the job; its index, or -1.
  int WaitForWorkerRunning(const std::string& job_id, int rank) {
    const Clock::time_point until = Clock::now() + seconds(30);
    while (Clock::now() < until) {
      const int index = WorkerRunning(job_id, rank);
      if (index >= 0) return index;
      std::this_thread::sleep_for(milliseconds(20));
    }
    return -1;
  }
  std::string WorkerState(int index) {
    nlohmann::json listed = cluster_.CtlJson({"workers"});
    if (listed.is_null()) return "";
    for (const auto& worker : listed["workers"]) {
      if (worker.value("hostname", "") == Hostname(index)) return worker.value("state", "");
    }
    return "";
  }

  // Committed checkpoint steps of a job, newest first (empty while there are none).
  std::vector<int64_t> CommittedSteps(const std::string& job_id) {
    absl::StatusOr<std::vector<int64_t>> steps = ListCommittedSteps(JobDir(job_id));
    return steps.ok() ? *steps : std::vector<int64_t>{};
  }
  // Polls the checkpoint directory until a checkpoint of at least `step` is committed.
  int64_t WaitForCheckpoint(const std::string& job_id, int64_t step, milliseconds timeout) {
    const Clock::time_point until = Clock::now() + timeout;
    while (Clock::now() < until) {
      std::vector<int64_t> steps = CommittedSteps(job_id);
      if (!steps.empty() && steps.front() >= step) return steps.front();
      std::this_thread::sleep_for(milliseconds(5));
    }
    return -1;
  }

  std::string Logs(const std::string& job_id) {
    CommandResult result = cluster_.Ctl({"logs", job_id}, seconds(30));
    EXPECT_EQ(result.exit_code, 0) << result.err;
    return result.out;
  }

  // Runs `spec` to the end with no fault and returns its final loss.
  double ReferenceLoss(const std::string& name, const FaultSpec& spec) {
    const std::string id = cluster_.SubmitJob(cluster_.WriteSpec(name, SpecYaml(name, spec)));
    if (id.empty()) return NAN;
    nlohmann::json done = cluster_.WaitForState(id, "SUCCEEDED", seconds(120));
    EXPECT_EQ(done.value("state", ""), "SUCCEEDED") << done.dump();
    EXPECT_EQ(done.value("attempt", 0), 1) << "the reference run must not be retried";
    return done.value("loss", NAN);
  }

  Cluster cluster_{0};
  std::vector<std::unique_ptr<ChildProcess>> workers_;
  int worker_starts_ = 0;
};

TEST_F(FaultToleranceTest, KilledWorkerIsDetectedAndTheJobResumesFromItsCheckpoint) {
  for (int index = 0; index < 3; ++index) StartWorker(index);
  ASSERT_TRUE(cluster_.WaitForWorkers(3, "IDLE", seconds(30)));
  FaultSpec spec;
  spec.steps = 600;
  spec.checkpoint_every = 100;
  spec.max_restarts = 1;
  const double reference_loss = ReferenceLoss("reference", spec);
  ASSERT_TRUE(std::isfinite(reference_loss));
  ASSERT_TRUE(cluster_.WaitForWorkers(3, "IDLE", seconds(30)));

  const std::string id = cluster_.SubmitJob(cluster_.WriteSpec("victim", SpecYaml("victim", spec)));
  ASSERT_FALSE(id.empty());
  // Rank 1's worker dies right after the first checkpoint is committed.
  const int killed = WaitForWorkerRunning(id, 1);
  ASSERT_GE(killed, 0) << "no worker runs rank 1 of " << id;
  const int64_t checkpoint = WaitForCheckpoint(id, 100, seconds(60));
  ASSERT_GE(checkpoint, 100) << "no checkpoint was committed";
  workers_[killed]->Signal(SIGKILL);
  const Clock::time_point killed_at = Clock::now();
  const int64_t killed_unix_millis =
      std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();

  // The coordinator notices the silent worker within its heartbeat timeout (plus one tick and
  // the time fsdpctl takes).
  std::string state;
  while (Clock::now() - killed_at < kHeartbeatTimeout + seconds(5)) {
    state = WorkerState(killed);
    if (state == "LOST") break;
    std::this_thread::sleep_for(milliseconds(100));
  }
  EXPECT_EQ(state, "LOST") << "the killed worker is still listed as " << state;
  EXPECT_LE(Clock::now() - killed_at, kHeartbeatTimeout + seconds(5));

  nlohmann::json done = cluster_.WaitForState(id, "SUCCEEDED", seconds(120));
  ASSERT_EQ(done.value("state", ""), "SUCCEEDED") << done.dump();
  // The failed attempt went RETRYING (not FAILED) within the heartbeat timeout: the surviving
  // rank aborted instead of hanging in a collective.
  const std::vector<std::string> states = StatesOf(done);
  EXPECT_EQ(CountOf(states, "RETRYING"), 1) << done["transitions"].dump();
  EXPECT_EQ(CountOf(states, "FAILED"), 0);
  for (const auto& change : done["transitions"]) {
    if (change.value("state", "") != "RETRYING") continue;
    EXPECT_EQ(change.value("attempt", 0), 1);
    EXPECT_LE(change.value("unix_millis", int64_t{0}) - killed_unix_millis,
              std::chrono::duration_cast<milliseconds>(kHeartbeatTimeout).count() + 2000)
        << "the attempt ended too late: " << change.dump();
  }
  EXPECT_EQ(done.value("attempt", 0), 2);
  // The second attempt ran on the workers still alive.
  for (const auto& worker_id : done["worker_ids"]) {
    nlohmann::json listed = cluster_.CtlJson({"workers"});
    for (const auto& worker : listed["workers"]) {
      if (worker.value("id", "") == worker_id) {
        EXPECT_NE(worker.value("hostname", ""), Hostname(killed));
      }
    }
  }

  // It resumed from its last checkpoint, not from scratch: its first step is the one after.
  const std::string logs = Logs(id);
  const std::string resumed = "resumed from the checkpoint of step ";
  const size_t at = logs.find(resumed);
  ASSERT_NE(at, std::string::npos) << logs;
  const int64_t resumed_step = std::stoll(logs.substr(at + resumed.size()));
  EXPECT_GE(resumed_step, checkpoint);
  EXPECT_LT(resumed_step, spec.steps);
  int exit_code = -1;
  std::vector<nlohmann::json> events = cluster_.WatchEvents(id, &exit_code, seconds(30));
  EXPECT_EQ(exit_code, 0);
  int64_t first_retry_step = -1;
  for (const auto& event : events) {
    if (event.value("type", "") == "step" && event.value("attempt", 0) == 2) {
      first_retry_step = event.value("step", int64_t{-1});
      break;
    }
  }
  EXPECT_EQ(first_retry_step, resumed_step + 1);

  // Same final loss as the uninterrupted run: the engine is deterministic and the checkpoint
  // holds the full optimizer state, so the resumed trajectory is the same to fp32 rounding.
  EXPECT_EQ(done.value("step", int64_t{0}), spec.steps);
  EXPECT_NEAR(done.value("loss", NAN), reference_loss, 1e-6 * std::abs(reference_loss))
      << "interrupted " << done.value("loss", NAN) << " vs uninterrupted " << reference_loss;
}

TEST_F(FaultToleranceTest, FailedCheckpointWriteFailsTheJobAndKeepsThePreviousCheckpoint) {
  for (int index = 0; index < 2; ++index) StartWorker(index);
  ASSERT_TRUE(cluster_.WaitForWorkers(2, "IDLE", seconds(30)));
  FaultSpec spec;
  spec.steps = 100000;  // ends by the fault long before
  spec.checkpoint_every = 100;
  spec.max_restarts = 0;
  const std::string id =
      cluster_.SubmitJob(cluster_.WriteSpec("blocked", SpecYaml("blocked", spec)));
  ASSERT_FALSE(id.empty());
  const int64_t good = WaitForCheckpoint(id, 100, seconds(60));
  ASSERT_GE(good, 100);
  // A regular file where the next step's directory must go: that checkpoint cannot be written.
  const int64_t blocked = good + spec.checkpoint_every;
  char name[32];
  std::snprintf(name, sizeof(name), "step-%08lld", static_cast<long long>(blocked));
  const std::string blocker = JobDir(id) + "/" + name;
  {
    std::ofstream file(blocker);
    file << "not a directory\n";
  }

  nlohmann::json done = cluster_.WaitForState(id, "FAILED", seconds(60));
  ASSERT_EQ(done.value("state", ""), "FAILED") << done.dump();
  const std::string reason = done.value("reason", "");
  EXPECT_NE(reason.find("checkpoint of step " + std::to_string(blocked)), std::string::npos)
      << "the reason does not say which checkpoint failed: " << reason;
  EXPECT_LT(done.value("step", int64_t{0}), spec.steps);

  // The previous checkpoint is still committed and every rank's file verifies.
  const std::vector<int64_t> committed = CommittedSteps(id);
  ASSERT_FALSE(committed.empty());
  EXPECT_EQ(committed.front(), good);
  for (int rank = 0; rank < 2; ++rank) {
    absl::StatusOr<RankCheckpoint> loaded = LoadRankCheckpoint(JobDir(id), good, rank, 2);
    ASSERT_TRUE(loaded.ok()) << "rank " << rank << ": " << loaded.status();
    EXPECT_EQ(loaded->step, good);
    EXPECT_FALSE(loaded->buffers.empty());
  }
  EXPECT_TRUE(std::filesystem::is_regular_file(blocker));
}

TEST_F(FaultToleranceTest, CorruptCheckpointIsSkippedAndTheJobResumesFromThePreviousOne) {
  for (int index = 0; index < 2; ++index) StartWorker(index);
  ASSERT_TRUE(cluster_.WaitForWorkers(2, "IDLE", seconds(30)));
  FaultSpec spec;
  spec.steps = 600;
  spec.checkpoint_every = 50;
  spec.max_restarts = 1;
  const std::string id =
      cluster_.SubmitJob(cluster_.WriteSpec("corrupt", SpecYaml("corrupt", spec)));
  ASSERT_FALSE(id.empty());
  const int killed = WaitForWorkerRunning(id, 1);
  ASSERT_GE(killed, 0);
  // Two checkpoints, then rank 1's worker dies. With no spare worker the job waits in RETRYING
  // while the newest checkpoint is corrupted, then a replacement worker lets it resume.
  ASSERT_GE(WaitForCheckpoint(id, 100, seconds(60)), 100);
  workers_[killed]->Signal(SIGKILL);
  nlohmann::json retrying = cluster_.WaitForState(id, "RETRYING", kHeartbeatTimeout + seconds(10));
  ASSERT_EQ(retrying.value("state", ""), "RETRYING") << retrying.dump();

  const std::vector<int64_t> committed = CommittedSteps(id);
  ASSERT_GE(committed.size(), 2u);
  const int64_t newest = committed[0];
  const int64_t previous = committed[1];
  char name[64];
  std::snprintf(name, sizeof(name), "/step-%08lld/rank-00000.bin", static_cast<long long>(newest));
  const std::string rank_file = JobDir(id) + name;
  {
    std::fstream file(rank_file, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(file.is_open()) << rank_file;
    file.seekg(0, std::ios::end);
    const std::streamoff size = file.tellg();
    ASSERT_GT(size, 64);
    file.seekg(size / 2);
    char byte = 0;
    file.read(&byte, 1);
    byte = static_cast<char>(byte ^ 0x5a);
    file.seekp(size / 2);
    file.write(&byte, 1);
  }
  EXPECT_FALSE(LoadRankCheckpoint(JobDir(id), newest, 0, 2).ok())
      << "the flipped byte should fail the checksum";

  StartWorker(2);
  nlohmann::json done = cluster_.WaitForState(id, "SUCCEEDED", seconds(120));
  ASSERT_EQ(done.value("state", ""), "SUCCEEDED") << done.dump();
  EXPECT_EQ(done.value("step", int64_t{0}), spec.steps);
  EXPECT_EQ(done.value("attempt", 0), 2);

  const std::string logs = Logs(id);
  EXPECT_NE(logs.find("skipping the checkpoint of step " + std::to_string(newest)),
            std::string::npos)
      << logs;
  EXPECT_NE(logs.find("resumed from the checkpoint of step " + std::to_string(previous)),
            std::string::npos)
      << logs;
}

// Issue 11 §3: bad input (here a token file that does not exist) fails the same way on every
// try, so the job fails at once with the cause, its restarts unused. Lost workers and crashes
// are still retried (KilledWorkerIsDetectedAndTheJobResumesFromItsCheckpoint).
TEST_F(FaultToleranceTest, BadInputFailsTheJobAtOnceWithItsReason) {
  for (int index = 0; index < 2; ++index) StartWorker(index);
  ASSERT_TRUE(cluster_.WaitForWorkers(2, "IDLE", seconds(30)));
  FaultSpec spec;
  spec.steps = 50;
  spec.checkpoint_every = 0;
  spec.max_restarts = 2;
  const std::string missing = cluster_.dir() + "/missing-tokens.bin";
  spec.data = "{source: tokens, path: " + missing + ", seq_len: 16}";
  const std::string id = cluster_.SubmitJob(cluster_.WriteSpec("doomed", SpecYaml("doomed", spec)));
  ASSERT_FALSE(id.empty());

  nlohmann::json done = cluster_.WaitForState(id, "FAILED", seconds(90));
  ASSERT_EQ(done.value("state", ""), "FAILED") << done.dump();
  const std::vector<std::string> states = StatesOf(done);
  EXPECT_EQ(CountOf(states, "RETRYING"), 0) << done["transitions"].dump();
  EXPECT_EQ(done.value("attempt", 0), 1);
  const std::string reason = done.value("reason", "");
  EXPECT_NE(reason.find("missing-tokens.bin"), std::string::npos)
      << "the reason does not name the cause: " << reason;
  EXPECT_NE(reason.find("not retried"), std::string::npos) << reason;

  const std::string logs = Logs(id);
  EXPECT_NE(logs.find("missing-tokens.bin"), std::string::npos) << logs;
}

}  // namespace
}  // namespace fsdpd::testing
