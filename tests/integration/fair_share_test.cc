// Sharing the cluster, through the real fsdpd, fsdpd-worker and fsdpctl binaries: a job no
// registered fleet could run is held with its reason and blocks nobody, jobs of two submitters
// all complete, a role cannot ask for more priority than its cap, and a worker's memory claim is
// capped by the coordinator's --max-worker-memory.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "fsdpd/v1/jobs.grpc.pb.h"
#include "fsdpd/v1/worker.grpc.pb.h"
#include "tests/integration/process_harness.h"

namespace fsdpd::testing {
namespace {

using std::chrono::seconds;
using ::testing::HasSubstr;

constexpr char kAlice[] = "alice-token-0123456789";
constexpr char kBob[] = "bob-token-0123456789";
constexpr char kAdmin[] = "admin-token-0123456789";
constexpr char kWorkerToken[] = "worker-token-0123456789";

class FairShareTest : public ::testing::Test {
 protected:
  void SetUp() override { IsolateClientEnvironment(dir_.path()); }

  // fsdpd with a short heartbeat timeout (held jobs are annotated once the workers of a
  // restarted coordinator had that long to come back) and `flags`; with tokens when asked.
  void StartCoordinator(std::vector<std::string> flags, bool tokens) {
    std::vector<std::string> argv{BuildPath("server/fsdpd"),
                                  "--listen",
                                  "127.0.0.1:0",
                                  "--metrics-listen",
                                  "",
                                  "--state-dir",
                                  dir_.path() + "/state",
                                  "--heartbeat-timeout",
                                  "2s"};
    if (tokens) {
      tokens_ = true;
      const std::string tokens_file = dir_.path() + "/tokens";
      WriteFile(tokens_file, HashTokenLine(dir_.path(), kAlice, "submitter", "alice") +
                                 HashTokenLine(dir_.path(), kBob, "submitter", "bob") +
                                 HashTokenLine(dir_.path(), kAdmin, "admin", "admin") +
                                 HashTokenLine(dir_.path(), kWorkerToken, "worker", "workers"));
      argv.insert(argv.end(), {"--tokens-file", tokens_file});
    }
    argv.insert(argv.end(), flags.begin(), flags.end());
    coordinator_ = std::make_unique<ChildProcess>(argv, dir_.path() + "/fsdpd.log");
    // The kernel picks the port; fsdpd logs the one it bound.
    address_ = coordinator_->WaitForAddress("fsdpd listening on ", seconds(30));
    ASSERT_FALSE(address_.empty()) << ReadFile(dir_.path() + "/fsdpd.log");
  }

  void StartWorker() {
    const int index = static_cast<int>(workers_.size());
    std::vector<std::string> argv{BuildPath("worker/fsdpd-worker"),
                                  "--coordinator",
                                  address_,
                                  "--device",
                                  "cpu",
                                  "--checkpoint-root",
                                  dir_.path() + "/checkpoints",
                                  "--hostname",
                                  "fair-" + std::to_string(index),
                                  "--heartbeat-interval",
                                  "400ms",
                                  "--allowed-root",
                                  dir_.path()};
    if (tokens_) {
      const std::string token_file = dir_.path() + "/worker.token";
      WriteFile(token_file, std::string(kWorkerToken) + "\n");
      argv.insert(argv.end(), {"--token-file", token_file});
    }
    workers_.push_back(std::make_unique<ChildProcess>(
        argv, dir_.path() + "/worker-" + std::to_string(index) + ".log"));
  }

  CommandResult Ctl(const std::string& token, std::vector<std::string> args) {
    std::vector<std::string> argv{BuildPath("client/fsdpctl"), "--coordinator", address_};
    if (!token.empty()) {
      const std::string token_file = dir_.path() + "/ctl-" + std::to_string(ctl_calls_++);
      WriteFile(token_file, token + std::string("\n"));
      argv.insert(argv.end(), {"--token-file", token_file});
    }
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv, seconds(30));
  }
  std::string AdminToken() const { return tokens_ ? kAdmin : ""; }

  bool WaitForIdleWorkers(int count) {
    const auto deadline = std::chrono::steady_clock::now() + seconds(60);
    while (std::chrono::steady_clock::now() < deadline) {
      CommandResult listed = Ctl(AdminToken(), {"--json", "workers"});
      nlohmann::json listing = nlohmann::json::parse(listed.out, nullptr, false);
      int idle = 0;
      if (listing.is_object() && listing["workers"].is_array()) {
        for (const nlohmann::json& worker : listing["workers"]) {
          idle += worker.value("state", "") == "IDLE";
        }
      }
      if (idle == count) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ADD_FAILURE() << "never " << count << " idle workers\n" << Logs();
    return false;
  }

  // `fsdpctl submit`; the id, or the failed command's stderr in *error.
  std::string Submit(const std::string& token, const std::string& name, const std::string& yaml,
                     std::string* error = nullptr) {
    const std::string path = dir_.path() + "/" + name + ".yaml";
    WriteFile(path, yaml);
    CommandResult result = Ctl(token, {"--json", "submit", path});
    if (error != nullptr) *error = result.err;
    if (result.exit_code != 0) {
      if (error == nullptr) ADD_FAILURE() << "submit " << name << ": " << result.err;
      return "";
    }
    nlohmann::json out = nlohmann::json::parse(result.out, nullptr, false);
    return out.is_object() ? out.value("id", "") : "";
  }

  nlohmann::json Status(const std::string& job_id) {
    CommandResult result = Ctl(AdminToken(), {"--json", "status", job_id});
    nlohmann::json status = nlohmann::json::parse(result.out, nullptr, false);
    return status.is_object() ? status : nlohmann::json::object();
  }

  // Polls the job's status until `predicate` holds, or fails the test after `timeout`.
  nlohmann::json WaitFor(const std::string& job_id,
                         const std::function<bool(const nlohmann::json&)>& predicate,
                         const std::string& what, seconds timeout = seconds(90)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    nlohmann::json status;
    while (std::chrono::steady_clock::now() < deadline) {
      status = Status(job_id);
      if (predicate(status)) return status;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ADD_FAILURE() << job_id << " never " << what << ": " << status.dump() << "\n" << Logs();
    return status;
  }
  nlohmann::json WaitForState(const std::string& job_id, const std::string& state,
                              seconds timeout = seconds(90)) {
    return WaitFor(
        job_id, [&](const nlohmann::json& status) { return status.value("state", "") == state; },
        "reached " + state, timeout);
  }

  std::string Logs() {
    std::string logs = "--- fsdpd\n" + ReadFile(dir_.path() + "/fsdpd.log");
    for (size_t i = 0; i < workers_.size(); ++i) {
      logs += "--- worker " + std::to_string(i) + "\n" +
              ReadFile(dir_.path() + "/worker-" + std::to_string(i) + ".log");
    }
    return logs;
  }

  TempDir dir_;
  std::string address_;
  bool tokens_ = false;
  int ctl_calls_ = 0;
  std::unique_ptr<ChildProcess> coordinator_;
  std::vector<std::unique_ptr<ChildProcess>> workers_;
};

bool HasTransition(const nlohmann::json& status, const std::string& state,
                   const std::string& text) {
  for (const nlohmann::json& change : status["transitions"]) {
    if (change.value("state", "") == state &&
        change.value("reason", "").find(text) != std::string::npos) {
      return true;
    }
  }
  return false;
}

std::string WithPriority(const std::string& yaml, int priority) {
  return yaml + "priority: " + std::to_string(priority) + "\n";
}

// A submitter asks for every worker there will ever be, at the highest priority. The job is held
// with its reason, and a one-rank job submitted after it runs on an idle worker; the held job is
// considered again when a worker registers.
TEST_F(FairShareTest, AnUnrunnableHogIsHeldAndASmallJobRunsOnAnIdleWorker) {
  StartCoordinator({}, /*tokens=*/false);
  StartWorker();
  StartWorker();
  ASSERT_TRUE(WaitForIdleWorkers(2));

  const std::string hog = Submit("", "hog", WithPriority(TinySpec("hog", 10, 1000), 1000));
  ASSERT_FALSE(hog.empty());
  const std::string small = Submit("", "small", TinySpec("small", 5, 1));
  ASSERT_FALSE(small.empty());

  nlohmann::json done = WaitForState(small, "SUCCEEDED", seconds(60));
  EXPECT_EQ(done["worker_ids"].size(), 1u) << done.dump();
  nlohmann::json held = WaitFor(
      hog,
      [](const nlohmann::json& status) {
        return status.value("reason", "").find("the fleet has 2 registered") != std::string::npos;
      },
      "said why it waits", seconds(30));
  EXPECT_EQ(held.value("state", ""), "PENDING");
  EXPECT_THAT(held.value("reason", ""), HasSubstr("needs 1000 cpu workers"));

  // A third worker: the held job is considered again and its reason follows the fleet.
  StartWorker();
  WaitFor(
      hog,
      [](const nlohmann::json& status) {
        return status.value("reason", "").find("the fleet has 3 registered") != std::string::npos;
      },
      "saw the third worker", seconds(30));
  // And the fleet still runs the jobs it can.
  const std::string pair = Submit("", "pair", TinySpec("pair", 5, 2));
  WaitForState(pair, "SUCCEEDED", seconds(60));
  EXPECT_EQ(Status(hog).value("state", ""), "PENDING");
}

// Two submitters share two workers with a mix of sizes and priorities under their cap; one of
// alice's jobs asks for more workers than exist. Every other job completes, each owned by who
// submitted it, and the one that cannot run says why.
TEST_F(FairShareTest, AMixOfJobsFromTwoSubmittersAllComplete) {
  StartCoordinator({}, /*tokens=*/true);
  StartWorker();
  StartWorker();
  ASSERT_TRUE(WaitForIdleWorkers(2));

  struct Submitted {
    std::string id;
    std::string owner;
  };
  std::vector<Submitted> jobs;
  // Above the submitter's default cap (100): refused, naming it.
  std::string error;
  EXPECT_TRUE(
      Submit(kBob, "bob-greedy", WithPriority(TinySpec("bob-greedy", 8, 1), 1000), &error).empty());
  EXPECT_THAT(error, HasSubstr("priority: must be at most 100"));
  const std::string too_wide =
      Submit(kAlice, "alice-wide", WithPriority(TinySpec("alice-wide", 10, 3), 50));
  ASSERT_FALSE(too_wide.empty());
  const std::vector<std::tuple<const char*, const char*, int, int>> mix = {
      {kAlice, "alice-pair", 2, 20}, {kBob, "bob-one", 1, 20},  {kAlice, "alice-one", 1, 0},
      {kBob, "bob-pair", 2, 0},      {kBob, "bob-late", 1, -5}, {kAlice, "alice-last", 1, 5},
  };
  for (const auto& [token, name, world_size, priority] : mix) {
    const std::string id =
        Submit(token, name, WithPriority(TinySpec(name, 8, world_size), priority));
    ASSERT_FALSE(id.empty()) << name;
    jobs.push_back({id, token == std::string(kAlice) ? "token:alice" : "token:bob"});
  }
  // One deadline for the whole mix: a wedged queue fails once, not once per job.
  const auto deadline = std::chrono::steady_clock::now() + seconds(150);
  for (const Submitted& job : jobs) {
    const auto left =
        std::chrono::duration_cast<seconds>(deadline - std::chrono::steady_clock::now());
    nlohmann::json status = WaitForState(job.id, "SUCCEEDED", std::max(left, seconds(1)));
    EXPECT_EQ(status.value("owner", ""), job.owner) << status.dump();
    if (status.value("state", "") != "SUCCEEDED") break;
  }
  nlohmann::json held = WaitFor(
      too_wide,
      [](const nlohmann::json& status) {
        return status.value("reason", "").find("needs 3 cpu workers") != std::string::npos;
      },
      "said why it waits", seconds(30));
  EXPECT_EQ(held.value("state", ""), "PENDING");
  // Its owner may still cancel it.
  EXPECT_EQ(Ctl(kAlice, {"cancel", too_wide}).exit_code, 0);
  WaitForState(too_wide, "CANCELLED");
}

// A low job borrows the idle worker while a two-rank job waits for a busy one; when the busy one
// frees, the borrower is preempted (back to PENDING, no restart spent), the waiting job runs,
// and the borrower then runs again.
TEST_F(FairShareTest, ABackfilledJobGivesItsWorkerBackAndRunsAgain) {
  StartCoordinator({}, /*tokens=*/false);
  StartWorker();
  StartWorker();
  ASSERT_TRUE(WaitForIdleWorkers(2));
  const std::string first = Submit("", "first", TinySpec("first", 1'000'000, 1));
  WaitForState(first, "RUNNING", seconds(60));
  const std::string head = Submit("", "head", WithPriority(TinySpec("head", 5, 2), 5));
  const std::string lent = Submit("", "lent", TinySpec("lent", 1'000'000, 1));  // max_restarts 0
  nlohmann::json borrowed = WaitForState(lent, "RUNNING", seconds(60));
  EXPECT_TRUE(HasTransition(borrowed, "SCHEDULED", "backfilled")) << borrowed.dump();
  EXPECT_EQ(Status(head).value("state", ""), "PENDING");

  ASSERT_EQ(Ctl("", {"cancel", first}).exit_code, 0);
  nlohmann::json done = WaitForState(head, "SUCCEEDED", seconds(60));
  nlohmann::json again = WaitFor(
      lent,
      [](const nlohmann::json& status) {
        return status.value("state", "") == "RUNNING" && status.value("attempt", 0) == 2;
      },
      "ran again", seconds(60));
  // Attempt 2 although max_restarts is 0: the preemption spent no restart.
  EXPECT_TRUE(HasTransition(again, "PENDING", "preempted for " + head)) << again.dump();
  ASSERT_EQ(Ctl("", {"cancel", lent}).exit_code, 0);
  WaitForState(lent, "CANCELLED", seconds(30));
}

// --max-priority caps what each role may ask for: above it the submission is refused with the
// field and the cap named, at it the job is accepted.
TEST_F(FairShareTest, APriorityAboveTheRolesCapIsRefused) {
  StartCoordinator({"--max-priority", "submitter=10,admin=500"}, /*tokens=*/true);
  std::string error;
  EXPECT_TRUE(Submit(kAlice, "greedy", WithPriority(TinySpec("greedy", 5, 1), 11), &error).empty());
  EXPECT_THAT(error, HasSubstr("priority"));
  EXPECT_THAT(error, HasSubstr("at most 10"));
  EXPECT_THAT(error, HasSubstr("submitter"));
  // A dry run says the same.
  const std::string path = dir_.path() + "/greedy.yaml";
  CommandResult dry = Ctl(kAlice, {"submit", "--dry-run", path});
  EXPECT_NE(dry.exit_code, 0);
  EXPECT_THAT(dry.err, HasSubstr("at most 10"));

  EXPECT_FALSE(Submit(kAlice, "fair", WithPriority(TinySpec("fair", 5, 1), 10)).empty());
  EXPECT_TRUE(
      Submit(kAdmin, "admin-greedy", WithPriority(TinySpec("admin", 5, 1), 501), &error).empty());
  EXPECT_THAT(error, HasSubstr("at most 500"));
  EXPECT_FALSE(Submit(kAdmin, "admin-high", WithPriority(TinySpec("admin", 5, 1), 500)).empty());
}

// A registration that claims a petabyte is believed only up to --max-worker-memory: a spec whose
// rank needs hundreds of GB is refused, by a dry run and by a submission.
TEST_F(FairShareTest, APetabyteMemoryClaimIsCappedByTheCeiling) {
  StartCoordinator({"--max-worker-memory", "8GiB"}, /*tokens=*/false);
  auto channel = grpc::CreateChannel(address_, grpc::InsecureChannelCredentials());
  auto stub = v1::WorkerService::NewStub(channel);
  v1::RegisterRequest request;
  request.set_hostname("rogue");
  request.set_device_kind("cpu");
  request.set_gpu_index(-1);
  request.set_memory_bytes(int64_t{1} << 50);
  request.set_address("127.0.0.1");
  v1::RegisterResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + seconds(10));
  ASSERT_TRUE(stub->Register(&context, request, &response).ok());

  // About 50 billion parameters on two ranks: hundreds of GB a rank.
  const std::string huge =
      "name: huge\n"
      "model: {vocab: 32000, dim: 8192, layers: 64, heads: 64, ffn_mult: 4}\n"
      "data: {source: synthetic, seq_len: 16}\n"
      "train: {batch_size: 1, steps: 1}\n"
      "parallel: {world_size: 2, device: cpu, param_dtype: fp32, reduce_dtype: fp32}\n";
  const std::string path = dir_.path() + "/huge.yaml";
  WriteFile(path, huge);
  CommandResult dry = Ctl("", {"submit", "--dry-run", path});
  EXPECT_NE(dry.exit_code, 0) << dry.out;
  EXPECT_THAT(dry.err, HasSubstr("parallel.device"));
  EXPECT_THAT(dry.err, HasSubstr("8192 MiB"));
  std::string error;
  EXPECT_TRUE(Submit("", "huge", huge, &error).empty());
  EXPECT_THAT(error, HasSubstr("8192 MiB"));

  // fsdpctl lists the memory the coordinator admits; the claim stays beside it.
  CommandResult listed = Ctl("", {"--json", "workers"});
  nlohmann::json listing = nlohmann::json::parse(listed.out, nullptr, false);
  ASSERT_TRUE(listing.is_object() && listing["workers"].size() == 1) << listed.out << listed.err;
  EXPECT_EQ(listing["workers"][0].value("memory_bytes", int64_t{0}), int64_t{8} << 30)
      << listing.dump();
  auto jobs = v1::JobService::NewStub(channel);
  grpc::ClientContext list_context;
  v1::ListWorkersResponse workers;
  ASSERT_TRUE(jobs->ListWorkers(&list_context, v1::ListWorkersRequest(), &workers).ok());
  ASSERT_EQ(workers.workers_size(), 1);
  EXPECT_EQ(workers.workers(0).claimed_memory_bytes(), int64_t{1} << 50);
  EXPECT_THAT(workers.workers(0).memory_note(), HasSubstr("--max-worker-memory"));
}

}  // namespace
}  // namespace fsdpd::testing
