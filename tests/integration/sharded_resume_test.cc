// A sharded token dataset through the real daemon (fsdpd, fsdpd-worker, fsdpctl on loopback):
// a job with gradient accumulation over a manifest of three shards is killed mid-epoch, right
// after a checkpoint, and resumes on a fresh worker; every step it reports, before and after
// the kill, has the loss of the same step of an uninterrupted run. The CPU engine is
// deterministic and the checkpoint holds the whole optimizer state, so a loss differs only if
// the resumed job read other tokens than the uninterrupted one (another epoch order, or the
// stream restarted at its beginning). A shard that vanishes fails the job naming it.
#include <gtest/gtest.h>
#include <signal.h>

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

constexpr int64_t kSteps = 800;
constexpr int64_t kCheckpointEvery = 100;
constexpr int64_t kEvalEvery = 40;
// batch_size 2 × grad_accum_steps 2 rows a step; the shards hold 62 + 43 + 19 windows.
constexpr int64_t kRowsPerStep = 4;
constexpr int64_t kWindows = 124;

class ShardedResumeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cluster_.StartCoordinator());
    WriteShards();
  }
  void TearDown() override {
    if (HasFailure()) std::cerr << cluster_.Logs();
  }

  // Three shards of pseudo-random ids below 64 (uint16) and a manifest with their counts.
  void WriteShards() {
    std::filesystem::create_directories(cluster_.dir() + "/shards");
    std::ofstream manifest(Manifest());
    uint64_t state = 12345;
    int index = 0;
    for (int tokens : {1000, 700, 313}) {
      const std::string name = "shards/part-" + std::to_string(index++) + ".bin";
      std::ofstream shard(cluster_.dir() + "/" + name, std::ios::binary);
      for (int i = 0; i < tokens; ++i) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        const uint16_t id = static_cast<uint16_t>((state >> 33) % 64);
        shard.write(reinterpret_cast<const char*>(&id), sizeof(id));
      }
      manifest << name << "\t" << tokens << "\n";
    }
  }
  std::string Manifest() const { return cluster_.dir() + "/train.manifest"; }
  // The held-out data: the last shard, read as one token file.
  std::string HeldOut() const { return cluster_.dir() + "/shards/part-2.bin"; }

  std::string SpecYaml(const std::string& name) const {
    std::ostringstream yaml;
    yaml << "name: " << name << "\n"
         << "model: {vocab: 64, dim: 32, layers: 1, heads: 2, ffn_mult: 2}\n"
         << "data: {source: tokens, path: " << Manifest()
         << ", seq_len: 16, token_bytes: 2, eval_path: " << HeldOut()
         << ", eval_every: " << kEvalEvery << ", eval_batches: 2}\n"
         << "train: {batch_size: 2, grad_accum_steps: 2, steps: " << kSteps
         << ", lr: 1.0e-3, seed: 7}\n"
         << "parallel: {world_size: 1, device: cpu, param_dtype: fp32, reduce_dtype: fp32}\n"
         << "checkpoint: {every_steps: " << kCheckpointEvery << ", keep: 3}\n"
         << "profile: {steps: 0}\n"
         << "max_restarts: 1\n";
    return yaml.str();
  }

  void StartWorker() {
    const std::string log = cluster_.dir() + "/worker." + std::to_string(++worker_starts_) + ".log";
    worker_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{BuildPath("worker/fsdpd-worker"), "--coordinator",
                                 cluster_.address(), "--device", "cpu", "--checkpoint-root",
                                 cluster_.dir() + "/checkpoints", "--hostname",
                                 "shard-worker-" + std::to_string(worker_starts_),
                                 "--heartbeat-interval", "500ms", "--allowed-root", cluster_.dir()},
        log);
  }

  // Step → loss of every step event of the job, and the first step of each attempt; step →
  // validation loss of the steps that carry one.
  std::map<int64_t, double> StepLosses(const std::string& id, std::map<int, int64_t>* first_steps,
                                       std::map<int64_t, double>* eval_losses) {
    int exit_code = -1;
    std::map<int64_t, double> losses;
    for (const auto& event : cluster_.WatchEvents(id, &exit_code, seconds(60))) {
      if (event.value("type", "") != "step") continue;
      const int64_t step = event.value("step", int64_t{-1});
      losses[step] = event.value("loss", NAN);
      if (event.contains("eval_loss")) (*eval_losses)[step] = event.value("eval_loss", NAN);
      if (first_steps != nullptr) first_steps->emplace(event.value("attempt", 0), step);
    }
    EXPECT_EQ(exit_code, 0);
    return losses;
  }

  int64_t WaitForCheckpoint(const std::string& uid, int64_t step, milliseconds timeout) {
    const Clock::time_point until = Clock::now() + timeout;
    while (Clock::now() < until) {
      absl::StatusOr<std::vector<int64_t>> steps =
          ListCommittedSteps(cluster_.dir() + "/checkpoints/" + uid);
      if (steps.ok() && !steps->empty() && steps->front() >= step) return steps->front();
      std::this_thread::sleep_for(milliseconds(5));
    }
    return -1;
  }

  Cluster cluster_{0};
  std::unique_ptr<ChildProcess> worker_;
  int worker_starts_ = 0;
};

TEST_F(ShardedResumeTest, KilledMidEpochTheResumedJobReadsTheUninterruptedTokenStream) {
  StartWorker();
  ASSERT_TRUE(cluster_.WaitForWorkers(1, "IDLE", seconds(30)));
  const std::string reference =
      cluster_.SubmitJob(cluster_.WriteSpec("reference", SpecYaml("reference")));
  ASSERT_FALSE(reference.empty());
  nlohmann::json done = cluster_.WaitForState(reference, "SUCCEEDED", seconds(120));
  ASSERT_EQ(done.value("state", ""), "SUCCEEDED") << done.dump();
  std::map<int64_t, double> expected_eval;
  const std::map<int64_t, double> expected = StepLosses(reference, nullptr, &expected_eval);
  ASSERT_EQ(expected_eval.size(), static_cast<size_t>(kSteps / kEvalEvery));
  ASSERT_EQ(expected.size(), static_cast<size_t>(kSteps));
  ASSERT_TRUE(cluster_.WaitForWorkers(1, "IDLE", seconds(30)));

  const std::string id = cluster_.SubmitJob(cluster_.WriteSpec("victim", SpecYaml("victim")));
  ASSERT_FALSE(id.empty());
  nlohmann::json running = cluster_.WaitForJob(
      id, [](const nlohmann::json& status) { return !status.value("uid", "").empty(); },
      seconds(30));
  const int64_t checkpoint =
      WaitForCheckpoint(running.value("uid", ""), kCheckpointEvery, seconds(60));
  ASSERT_GE(checkpoint, kCheckpointEvery) << "no checkpoint was committed";
  worker_->Signal(SIGKILL);
  ASSERT_TRUE(worker_->WaitForExit(seconds(10)));
  StartWorker();
  done = cluster_.WaitForState(id, "SUCCEEDED", seconds(120));
  ASSERT_EQ(done.value("state", ""), "SUCCEEDED") << done.dump();
  ASSERT_EQ(done.value("attempt", 0), 2) << "the job was not interrupted: " << done.dump();

  std::map<int, int64_t> first_steps;
  std::map<int64_t, double> actual_eval;
  const std::map<int64_t, double> actual = StepLosses(id, &first_steps, &actual_eval);
  ASSERT_EQ(first_steps.count(2), 1u);
  const int64_t resumed_after = first_steps[2] - 1;
  EXPECT_GE(resumed_after, kCheckpointEvery);
  EXPECT_EQ(resumed_after % kCheckpointEvery, 0) << "attempt 2 must start after a checkpoint";
  EXPECT_NE(resumed_after * kRowsPerStep % kWindows, 0) << "the checkpoint must be mid-epoch";
  EXPECT_EQ(actual.rbegin()->first, kSteps);
  // One token changed moves this loss by 1e-3 or more; the same tokens agree to fp32 rounding.
  for (const auto& [step, loss] : actual) {
    ASSERT_EQ(expected.count(step), 1u) << step;
    EXPECT_NEAR(loss, expected.at(step), 1e-6 * std::abs(expected.at(step)))
        << "step " << step << (step > resumed_after ? " (resumed)" : "");
  }
  // The validation history is continuous across the restart: every kEvalEvery steps, each the
  // uninterrupted run's value (the held-out rows are the same every time).
  std::vector<int64_t> eval_steps;
  for (const auto& [step, loss] : actual_eval) {
    eval_steps.push_back(step);
    EXPECT_NEAR(loss, expected_eval.at(step), 1e-6 * std::abs(expected_eval.at(step)))
        << "validation at step " << step;
  }
  std::vector<int64_t> every;
  for (int64_t step = kEvalEvery; step <= kSteps; step += kEvalEvery) every.push_back(step);
  EXPECT_EQ(eval_steps, every);
}

TEST_F(ShardedResumeTest, AVanishedShardFailsTheJobNamingIt) {
  StartWorker();
  ASSERT_TRUE(cluster_.WaitForWorkers(1, "IDLE", seconds(30)));
  const std::string gone = cluster_.dir() + "/shards/part-1.bin";
  std::filesystem::remove(gone);
  const std::string id = cluster_.SubmitJob(cluster_.WriteSpec("vanished", SpecYaml("vanished")));
  ASSERT_FALSE(id.empty());
  nlohmann::json done = cluster_.WaitForState(id, "FAILED", seconds(60));
  ASSERT_EQ(done.value("state", ""), "FAILED") << done.dump();
  const std::string reason = done.value("reason", "");
  EXPECT_NE(reason.find(gone), std::string::npos) << reason;
  EXPECT_NE(reason.find("line 2 of manifest"), std::string::npos) << reason;
  EXPECT_EQ(done.value("attempt", 0), 1) << "a missing shard is not worth a retry";
}

}  // namespace
}  // namespace fsdpd::testing
