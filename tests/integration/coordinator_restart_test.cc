// The coordinator is killed with SIGKILL in the middle of a job and started again on the same
// state dir: the job and its history survive, the workers and a running `fsdpctl watch`
// reconnect, the workers resend the step reports and log lines it had not stored, and the job
// finishes.
#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>

#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/process_harness.h"

namespace fsdpd::testing {
namespace {

using std::chrono::seconds;

// Per rank, the steps the coordinator stored: of the step reports, or of the trainer's
// "step N | ..." log lines (written at steps 1-3, every 10th and the last).
struct StoredSteps {
  std::map<int, std::set<int64_t>> reports;
  std::map<int, std::set<int64_t>> log_lines;
};

StoredSteps ReadStoredSteps(const std::string& database, const std::string& job_id) {
  StoredSteps stored;
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(database.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    ADD_FAILURE() << "cannot open " << database << ": " << sqlite3_errmsg(db);
    sqlite3_close(db);
    return stored;
  }
  auto query = [&](const char* sql, auto&& row) {
    sqlite3_stmt* statement = nullptr;
    if (sqlite3_prepare_v2(db, sql, -1, &statement, nullptr) != SQLITE_OK) {
      ADD_FAILURE() << "cannot query " << database << ": " << sqlite3_errmsg(db);
    } else {
      sqlite3_bind_text(statement, 1, job_id.c_str(), -1, SQLITE_TRANSIENT);
      while (sqlite3_step(statement) == SQLITE_ROW) row(statement);
    }
    sqlite3_finalize(statement);
  };
  query("SELECT rank, step FROM step_reports WHERE job_id = ?1", [&](sqlite3_stmt* row) {
    stored.reports[sqlite3_column_int(row, 0)].insert(sqlite3_column_int64(row, 1));
  });
  query("SELECT rank, text FROM logs WHERE job_id = ?1", [&](sqlite3_stmt* row) {
    const char* text = reinterpret_cast<const char*>(sqlite3_column_text(row, 1));
    long long step = 0;
    if (text != nullptr && std::sscanf(text, "step %lld |", &step) == 1) {
      stored.log_lines[sqlite3_column_int(row, 0)].insert(step);
    }
  });
  sqlite3_close(db);
  return stored;
}

// Whether fsdpctl watch has printed a step event to `path` (complete lines only: it may be in
// the middle of writing one), polled until `timeout`.
bool WaitForPrintedStep(const std::string& path, std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < until) {
    const std::string text = ReadFile(path);
    const size_t complete = text.rfind('\n');
    if (complete != std::string::npos) {
      for (const nlohmann::json& event : ParseJsonLines(text.substr(0, complete + 1))) {
        if (event.value("type", "") == "step") return true;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

TEST(CoordinatorRestartTest, JobSurvivesAKilledCoordinator) {
  Cluster cluster(2);
  ASSERT_TRUE(cluster.StartCoordinator());
  ASSERT_TRUE(cluster.StartWorkers());
  nlohmann::json workers_before = cluster.CtlJson({"workers"});
  ASSERT_FALSE(workers_before.is_null());
  std::set<std::string> worker_ids;
  for (const auto& worker : workers_before["workers"]) worker_ids.insert(worker["id"]);

  constexpr int kSteps = 2000;
  const std::string id =
      cluster.SubmitJob(cluster.WriteSpec("survivor", TinySpec("survivor", kSteps)));
  ASSERT_FALSE(id.empty());
  nlohmann::json before = cluster.WaitForJob(
      id,
      [](const nlohmann::json& status) {
        return status.value("state", "") == "RUNNING" && status.value("step", 0) >= 3;
      },
      seconds(60));
  ASSERT_EQ(before.value("state", ""), "RUNNING") << before.dump() << cluster.Logs();
  const int64_t step_before_kill = before["step"];

  // A watch started before the kill rides through the restart: it reconnects and prints each
  // event of the job once.
  const std::string watch_path = cluster.dir() + "/watch.jsonl";
  std::unique_ptr<ChildProcess> watcher = cluster.StartWatch(id, watch_path);
  // It has printed at least one step before the coordinator goes away.
  ASSERT_TRUE(WaitForPrintedStep(watch_path, seconds(60)))
      << ReadFile(watch_path) << ReadFile(watcher->log_path());

  cluster.KillCoordinator(SIGKILL);
  // Training goes on while the coordinator is away; the workers buffer their reports. Every
  // worker has seen its session end before the coordinator comes back.
  ASSERT_TRUE(cluster.WaitForWorkerLogs("lost the session with the coordinator", seconds(60)))
      << cluster.Logs();
  ASSERT_TRUE(cluster.StartCoordinator());

  nlohmann::json listed = cluster.CtlJson({"list"});
  ASSERT_FALSE(listed.is_null());
  ASSERT_EQ(listed["jobs"].size(), 1u) << listed.dump();
  EXPECT_EQ(listed["jobs"][0]["id"], id);

  nlohmann::json done = cluster.WaitForState(id, "SUCCEEDED", seconds(120));
  ASSERT_EQ(done.value("state", ""), "SUCCEEDED") << done.dump() << cluster.Logs();
  EXPECT_EQ(done["step"], kSteps);

  ASSERT_TRUE(watcher->WaitForExit(seconds(60))) << ReadFile(watcher->log_path());
  EXPECT_EQ(watcher->exit_code(), 0)
      << "fsdpctl watch did not see the job succeed: " << ReadFile(watcher->log_path());
  const std::vector<nlohmann::json> live_events = ParseJsonLines(ReadFile(watch_path));
  std::vector<int64_t> live_steps;
  std::set<std::string> live_states;
  for (const auto& event : live_events) {
    if (event.value("type", "") == "step") live_steps.push_back(event["step"]);
    if (event.value("type", "") == "state") {
      const std::string key = event["state"].get<std::string>() + "@" +
                              std::to_string(event["unix_millis"].get<int64_t>());
      EXPECT_TRUE(live_states.insert(key).second) << "state change printed twice: " << key;
    }
  }
  ASSERT_FALSE(live_steps.empty());
  EXPECT_LE(live_steps.front(), step_before_kill);
  EXPECT_EQ(live_steps.back(), kSteps);
  for (size_t i = 1; i < live_steps.size(); ++i) {
    EXPECT_LT(live_steps[i - 1], live_steps[i]) << "watch printed a step twice or out of order";
  }
  ASSERT_FALSE(live_events.empty());
  EXPECT_EQ(live_events.back().value("state", ""), "SUCCEEDED");

  // The history from before the kill is still there, in order, up to the last step.
  int exit_code = -1;
  std::vector<nlohmann::json> events = cluster.WatchEvents(id, &exit_code, seconds(30));
  EXPECT_EQ(exit_code, 0);
  std::vector<int64_t> steps;
  for (const auto& event : events) {
    if (event.value("type", "") == "step") steps.push_back(event["step"]);
  }
  ASSERT_FALSE(steps.empty());
  EXPECT_LE(steps.front(), step_before_kill);
  EXPECT_EQ(steps.back(), kSteps);
  for (size_t i = 1; i < steps.size(); ++i) EXPECT_LT(steps[i - 1], steps[i]);

  // The same two workers came back, under their old ids, and are free again.
  ASSERT_TRUE(cluster.WaitForWorkers(2, "IDLE", seconds(30)));
  nlohmann::json workers_after = cluster.CtlJson({"workers"});
  std::set<std::string> ids_after;
  for (const auto& worker : workers_after["workers"]) {
    if (worker.value("state", "") == "IDLE") ids_after.insert(worker["id"]);
  }
  EXPECT_EQ(ids_after, worker_ids);

  // No rank's report or log line was lost with the killed coordinator: the workers resent what
  // it had not confirmed as stored. (SIGTERM writes what the new coordinator still buffers.)
  cluster.KillCoordinator(SIGTERM);
  const StoredSteps stored = ReadStoredSteps(cluster.dir() + "/state/fsdpd.db", id);
  ASSERT_EQ(stored.reports.size(), 2u);
  for (const auto& [rank, steps] : stored.reports) {
    EXPECT_EQ(steps.size(), static_cast<size_t>(kSteps)) << "rank " << rank << " lost reports";
    EXPECT_EQ(*steps.begin(), 1) << "rank " << rank;
    EXPECT_EQ(*steps.rbegin(), kSteps) << "rank " << rank;
  }
  std::set<int64_t> logged_steps = {1, 2, 3};
  for (int64_t step = 10; step <= kSteps; step += 10) logged_steps.insert(step);
  ASSERT_EQ(stored.log_lines.size(), 2u);
  for (const auto& [rank, steps] : stored.log_lines) {
    EXPECT_EQ(steps, logged_steps) << "rank " << rank << " lost log lines";
  }
  if (HasFailure()) std::cerr << cluster.Logs();
}

// A new state folder (a fresh install, a lost volume) restarts job ids at job-000001 while the
// workers and their checkpoint root live on. The new job-000001 must run from step 1: not sit
// SCHEDULED on workers that take it for the job they finished, and not resume the old job's
// checkpoint, which lives under the old job's unique id.
TEST(CoordinatorRestartTest, ANewStateFolderBesideTheSameWorkersRunsNewJobsFromTheStart) {
  Cluster cluster(2);
  ASSERT_TRUE(cluster.StartCoordinator());
  ASSERT_TRUE(cluster.StartWorkers());
  auto spec = [](const std::string& name, int64_t steps) {
    std::string yaml = TinySpec(name, steps);
    yaml.replace(yaml.find("checkpoint: {every_steps: 0}"),
                 std::string("checkpoint: {every_steps: 0}").size(),
                 "checkpoint: {every_steps: 5, keep: 2}");
    return yaml;
  };
  const std::string first = cluster.SubmitJob(cluster.WriteSpec("first", spec("first", 40)));
  ASSERT_EQ(first, "job-000001");
  nlohmann::json done = cluster.WaitForState(first, "SUCCEEDED", seconds(120));
  ASSERT_EQ(done.value("state", ""), "SUCCEEDED") << done.dump() << cluster.Logs();
  const std::string first_uid = done.value("uid", "");

  cluster.KillCoordinator(SIGKILL);
  cluster.UseStateDir(cluster.dir() + "/state-of-a-new-cluster");
  ASSERT_TRUE(cluster.StartCoordinator());
  ASSERT_TRUE(cluster.WaitForWorkers(2, "IDLE", seconds(60))) << cluster.Logs();

  const std::string second = cluster.SubmitJob(cluster.WriteSpec("second", spec("second", 20)));
  ASSERT_EQ(second, "job-000001");  // the same display id as the first
  nlohmann::json again = cluster.WaitForState(second, "SUCCEEDED", seconds(120));
  ASSERT_EQ(again.value("state", ""), "SUCCEEDED") << again.dump() << cluster.Logs();
  EXPECT_NE(again.value("uid", ""), first_uid);
  EXPECT_EQ(again.value("step", 0), 20);
  EXPECT_EQ(again.value("attempt", 0), 1);
  int exit_code = -1;
  std::vector<int64_t> steps;
  for (const auto& event : cluster.WatchEvents(second, &exit_code, seconds(60))) {
    if (event.value("type", "") == "step") steps.push_back(event["step"]);
  }
  ASSERT_FALSE(steps.empty());
  EXPECT_EQ(steps.front(), 1) << "the new job resumed instead of starting at step 1";
  EXPECT_EQ(steps.back(), 20);
}

}  // namespace
}  // namespace fsdpd::testing
