// A job's life on a real coordinator with two CPU workers: train to the end, cancel, and wait
// for workers that another job holds.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <thread>

#include "tests/integration/process_harness.h"

namespace fsdpd::testing {
namespace {

using std::chrono::seconds;

class JobLifecycleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cluster_.StartCoordinator());
    ASSERT_TRUE(cluster_.StartWorkers());
  }
  void TearDown() override {
    if (HasFailure()) std::cerr << cluster_.Logs();
  }

  Cluster cluster_{2};
};

std::vector<nlohmann::json> OfType(const std::vector<nlohmann::json>& events,
                                   const std::string& type) {
  std::vector<nlohmann::json> out;
  for (const auto& event : events) {
    if (event.value("type", "") == type) out.push_back(event);
  }
  return out;
}

TEST_F(JobLifecycleTest, TrainsToSuccessAndReplaysItsHistory) {
  constexpr int kSteps = 12;
  const std::string id = cluster_.SubmitJob(cluster_.WriteSpec("ok", TinySpec("ok", kSteps)));
  ASSERT_FALSE(id.empty());

  int exit_code = -1;
  std::vector<nlohmann::json> live = cluster_.WatchEvents(id, &exit_code, seconds(120));
  EXPECT_EQ(exit_code, 0) << "watch must exit 0 for a job that SUCCEEDED";
  std::vector<nlohmann::json> steps = OfType(live, "step");
  std::vector<nlohmann::json> states = OfType(live, "state");
  ASSERT_FALSE(states.empty());
  EXPECT_EQ(states.back()["state"], "SUCCEEDED");
  ASSERT_FALSE(steps.empty());
  EXPECT_EQ(steps.back()["step"], kSteps);
  for (const auto& step : steps) {
    ASSERT_TRUE(step.contains("loss") && step.contains("tokens_per_second")) << step.dump();
    EXPECT_TRUE(std::isfinite(step["loss"].get<double>())) << step.dump();
    EXPECT_GT(step["tokens_per_second"].get<double>(), 0.0) << step.dump();
  }

  nlohmann::json status = cluster_.Status(id);
  ASSERT_FALSE(status.is_null());
  EXPECT_EQ(status["id"], id);
  EXPECT_EQ(status["state"], "SUCCEEDED");
  EXPECT_EQ(status["step"], kSteps);
  EXPECT_TRUE(status.contains("reason"));
  EXPECT_DOUBLE_EQ(status["loss"].get<double>(), steps.back()["loss"].get<double>());

  // Watching a finished job replays the same history and ends at once.
  std::vector<nlohmann::json> replay = cluster_.WatchEvents(id, &exit_code, seconds(30));
  EXPECT_EQ(exit_code, 0);
  std::vector<nlohmann::json> replayed_steps = OfType(replay, "step");
  ASSERT_EQ(replayed_steps.size(), steps.size());
  for (size_t i = 0; i < steps.size(); ++i) {
    EXPECT_EQ(replayed_steps[i]["step"], steps[i]["step"]);
    EXPECT_DOUBLE_EQ(replayed_steps[i]["loss"].get<double>(), steps[i]["loss"].get<double>());
  }

  // Rank 0 uploaded the consolidated model; export writes it out whole.
  const std::string model = cluster_.dir() + "/model.safetensors";
  nlohmann::json exported = cluster_.CtlJson({"export", id, "-o", model});
  ASSERT_FALSE(exported.is_null());
  ASSERT_TRUE(std::filesystem::exists(model));
  EXPECT_GT(std::filesystem::file_size(model), 8u);
  EXPECT_EQ(exported["bytes"].get<int64_t>(),
            static_cast<int64_t>(std::filesystem::file_size(model)));

  CommandResult logs = cluster_.Ctl({"--json", "logs", id});
  EXPECT_EQ(logs.exit_code, 0) << logs.err;

  EXPECT_TRUE(cluster_.WaitForWorkers(2, "IDLE", seconds(10)));
}

TEST_F(JobLifecycleTest, CancelStopsARunningJobAndFreesTheWorkers) {
  const std::string id = cluster_.SubmitJob(cluster_.WriteSpec("long", TinySpec("long", 1000000)));
  ASSERT_FALSE(id.empty());
  nlohmann::json running = cluster_.WaitForJob(
      id,
      [](const nlohmann::json& status) {
        return status.value("state", "") == "RUNNING" && status.value("step", 0) >= 2;
      },
      seconds(60));
  ASSERT_EQ(running.value("state", ""), "RUNNING") << running.dump();

  nlohmann::json cancelled = cluster_.CtlJson({"cancel", id});
  ASSERT_FALSE(cancelled.is_null());
  nlohmann::json status = cluster_.WaitForState(id, "CANCELLED", seconds(20));
  EXPECT_EQ(status.value("state", ""), "CANCELLED") << status.dump();
  EXPECT_LT(status.value("step", int64_t{0}), 1000000);

  int exit_code = -1;
  std::vector<nlohmann::json> events = cluster_.WatchEvents(id, &exit_code, seconds(30));
  EXPECT_NE(exit_code, 0) << "watch exits 0 only for a job that SUCCEEDED";
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().value("state", ""), "CANCELLED");

  // The workers are idle again and can run the next job.
  EXPECT_TRUE(cluster_.WaitForWorkers(2, "IDLE", seconds(20)));
  const std::string next = cluster_.SubmitJob(cluster_.WriteSpec("next", TinySpec("next", 3)));
  EXPECT_EQ(cluster_.WaitForState(next, "SUCCEEDED", seconds(60)).value("state", ""), "SUCCEEDED");
}

TEST_F(JobLifecycleTest, SecondJobWaitsUntilTheWorkersAreFree) {
  constexpr int kFirstSteps = 1500;
  const std::string first =
      cluster_.SubmitJob(cluster_.WriteSpec("first", TinySpec("first", kFirstSteps)));
  ASSERT_FALSE(first.empty());
  nlohmann::json running = cluster_.WaitForJob(
      first,
      [](const nlohmann::json& status) {
        return status.value("state", "") == "RUNNING" && status.value("step", 0) >= 1;
      },
      seconds(60));
  ASSERT_EQ(running.value("state", ""), "RUNNING");

  const std::string second =
      cluster_.SubmitJob(cluster_.WriteSpec("second", TinySpec("second", 5)));
  ASSERT_FALSE(second.empty());
  // Gang scheduling: while the first job holds both workers the second holds none. The second
  // is read before the first, so a RUNNING first means it was running at that read too.
  int samples = 0;
  while (true) {
    nlohmann::json second_status = cluster_.Status(second);
    nlohmann::json first_status = cluster_.Status(first);
    if (first_status.value("state", "") != "RUNNING") break;
    EXPECT_EQ(second_status.value("state", ""), "PENDING") << second_status.dump();
    EXPECT_EQ(second_status.value("step", int64_t{-1}), 0);
    ++samples;
  }
  EXPECT_GT(samples, 0) << "the first job ended before the second could be seen waiting";

  nlohmann::json first_done = cluster_.WaitForState(first, "SUCCEEDED", seconds(120));
  EXPECT_EQ(first_done.value("state", ""), "SUCCEEDED") << first_done.dump();
  nlohmann::json second_done = cluster_.WaitForState(second, "SUCCEEDED", seconds(60));
  EXPECT_EQ(second_done.value("state", ""), "SUCCEEDED") << second_done.dump();
  EXPECT_EQ(second_done.value("step", int64_t{0}), 5);
  EXPECT_GE(second_done.value("started_unix_millis", int64_t{0}),
            first_done.value("finished_unix_millis", int64_t{0}));
}

TEST_F(JobLifecycleTest, ProfilingWindowGivesAKernelTableAndATrace) {
  std::string yaml = TinySpec("profiled", 8);
  yaml.replace(yaml.find("profile: {steps: 0}"), std::string("profile: {steps: 0}").size(),
               "profile: {start_step: 3, steps: 2}");
  const std::string id = cluster_.SubmitJob(cluster_.WriteSpec("profiled", yaml));
  ASSERT_FALSE(id.empty());
  ASSERT_EQ(cluster_.WaitForState(id, "SUCCEEDED", seconds(60)).value("state", ""), "SUCCEEDED");

  nlohmann::json profile = cluster_.CtlJson({"profile", id});
  ASSERT_FALSE(profile.is_null());
  EXPECT_EQ(profile["start_step"], 3);
  EXPECT_EQ(profile["steps"], 2);
  ASSERT_FALSE(profile["kernels"].empty()) << profile.dump();
  for (const auto& kernel : profile["kernels"]) {
    EXPECT_FALSE(kernel["name"].get<std::string>().empty());
    EXPECT_GT(kernel["calls"].get<int64_t>(), 0);
  }

  const std::string trace_path = cluster_.dir() + "/trace.json";
  ASSERT_FALSE(cluster_.CtlJson({"trace", id, "-o", trace_path}).is_null());
  nlohmann::json trace = nlohmann::json::parse(ReadFile(trace_path), nullptr, false);
  ASSERT_FALSE(trace.is_discarded()) << "the trace is not JSON";
  EXPECT_FALSE(trace["traceEvents"].empty());
}

// A tiny spec that reads a text file (byte-level, so vocab 256).
std::string TextSpec(const std::string& name, const std::string& path) {
  std::string yaml = TinySpec(name, 5);
  auto replace = [&](const std::string& from, const std::string& to) {
    yaml.replace(yaml.find(from), from.size(), to);
  };
  replace("vocab: 64", "vocab: 256");
  replace("data: {source: synthetic, seq_len: 16}",
          "data: {source: text, path: " + path + ", seq_len: 16}");
  return yaml;
}

TEST_F(JobLifecycleTest, AFailingJobReportsWhyAndTheWorkersCarryOn) {
  // The data file does not exist: the trainer fails on every rank, the workers survive.
  const std::string missing = TextSpec("missing", cluster_.dir() + "/no-such-corpus.txt");
  const std::string failed = cluster_.SubmitJob(cluster_.WriteSpec("missing", missing));
  ASSERT_FALSE(failed.empty());
  nlohmann::json status = cluster_.WaitForState(failed, "FAILED", seconds(60));
  EXPECT_EQ(status.value("state", ""), "FAILED") << status.dump();
  EXPECT_NE(status.value("reason", "").find("no-such-corpus.txt"), std::string::npos)
      << status.value("reason", "");

  // A path outside the workers' --allowed-root is refused before anything reads it. (A path
  // into /etc is refused earlier, at submission: spec_rejection_test.cc.)
  const std::string outside = TextSpec("outside", "/usr/lib/os-release");
  const std::string refused = cluster_.SubmitJob(cluster_.WriteSpec("outside", outside));
  ASSERT_FALSE(refused.empty());
  status = cluster_.WaitForState(refused, "FAILED", seconds(60));
  EXPECT_EQ(status.value("state", ""), "FAILED") << status.dump();
  EXPECT_NE(status.value("reason", "").find("allowed"), std::string::npos)
      << status.value("reason", "");

  EXPECT_TRUE(cluster_.WaitForWorkers(2, "IDLE", seconds(20)));
  const std::string next = cluster_.SubmitJob(cluster_.WriteSpec("after", TinySpec("after", 3)));
  EXPECT_EQ(cluster_.WaitForState(next, "SUCCEEDED", seconds(60)).value("state", ""), "SUCCEEDED");
}

}  // namespace
}  // namespace fsdpd::testing
