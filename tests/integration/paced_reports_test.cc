// Backpressure end to end (server/report_pacer.h, worker/session_stream.cc): a coordinator that
// fell behind its workers, here frozen as a process starved of CPU is, paces them, and real
// fsdpd-worker processes then send their step reports inside heartbeats. The job loses nothing:
// it succeeds with every step's event, once and in order.
#include <gtest/gtest.h>

#include "tests/integration/process_harness.h"

namespace fsdpd::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(PacedReportsTest, AFrozenCoordinatorPacesItsWorkersAndTheJobLosesNoStep) {
  Cluster cluster(2);
  ASSERT_TRUE(cluster.StartCoordinator());
  ASSERT_TRUE(cluster.StartWorkers());
  constexpr int kSteps = 3000;
  const std::string id = cluster.SubmitJob(cluster.WriteSpec("paced", TinySpec("paced", kSteps)));
  ASSERT_FALSE(id.empty());
  const nlohmann::json started = cluster.WaitForJob(
      id, [](const nlohmann::json& status) { return status.value("step", 0) >= 20; }, seconds(60));
  ASSERT_GE(started.value("step", 0), 20) << cluster.Logs();

  // Frozen for 2 s: its next tick finds a 2 s stall, far above the pacing bound (a quarter of
  // the 1 s heartbeat interval) and below the lost-worker bound (a quarter of the 5 s timeout).
  cluster.FreezeCoordinator(milliseconds(2000));
  ASSERT_TRUE(cluster.WaitForWorkerLogs("the coordinator paces step reports", seconds(30)))
      << cluster.Logs();
  // Paced while the job still had steps to report: those went inside heartbeats.
  const int64_t paced_at = cluster.Status(id).value("step", int64_t{0});
  EXPECT_LT(paced_at, kSteps) << "the job ended before its workers were paced";

  int exit_code = -1;
  const std::vector<nlohmann::json> events = cluster.WatchEvents(id, &exit_code, seconds(180));
  EXPECT_EQ(exit_code, 0) << cluster.Logs();
  std::vector<int64_t> steps;
  std::string last_state;
  for (const nlohmann::json& event : events) {
    if (event.value("type", "") == "step") steps.push_back(event["step"].get<int64_t>());
    if (event.value("type", "") == "state") last_state = event["state"];
  }
  EXPECT_EQ(last_state, "SUCCEEDED") << cluster.Logs();
  ASSERT_EQ(steps.size(), static_cast<size_t>(kSteps)) << "a step was lost or repeated";
  for (int i = 0; i < kSteps; ++i) ASSERT_EQ(steps[i], i + 1) << "steps out of order";
  const nlohmann::json status = cluster.Status(id);
  EXPECT_EQ(status.value("attempt", 0), 1) << "the freeze cost a retry";

  // Still paced when the job ended (pacing eases only after 30 s of calm), so the steps after
  // the freeze came in heartbeats; the coordinator said so in its log.
  EXPECT_NE(cluster.Logs().find("step reports paced: the coordinator lags"), std::string::npos);
}

}  // namespace
}  // namespace fsdpd::testing
