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
  const std::string first =
      cluster_.SubmitJob(cluster_.WriteSpec("first", TinySpec("first", 1000000)));
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
  // Gang scheduling: both workers are busy, so the second job holds none of them.
  std::this_thread::sleep_for(seconds(2));
  nlohmann::json waiting = cluster_.Status(second);
  EXPECT_EQ(waiting.value("state", ""), "PENDING") << waiting.dump();
  EXPECT_EQ(waiting.value("step", int64_t{-1}), 0);
  EXPECT_EQ(cluster_.Status(first).value("state", ""), "RUNNING");

  ASSERT_FALSE(cluster_.CtlJson({"cancel", first}).is_null());
  nlohmann::json done = cluster_.WaitForState(second, "SUCCEEDED", seconds(60));
  EXPECT_EQ(done.value("state", ""), "SUCCEEDED") << done.dump();
  EXPECT_EQ(done.value("step", int64_t{0}), 5);
  nlohmann::json first_status = cluster_.Status(first);
  EXPECT_EQ(first_status.value("state", ""), "CANCELLED");
  EXPECT_GE(done.value("started_unix_millis", int64_t{0}),
            first_status.value("finished_unix_millis", int64_t{0}));
}

}  // namespace
}  // namespace fsdpd::testing
