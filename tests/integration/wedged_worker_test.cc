// A worker must never be wedged by a job, and a worker that cannot do a job's work must not be
// given it. Real fsdpd, fsdpd-worker and fsdpctl processes on loopback (coordinator heartbeat
// timeout 5 s):
//  - a FIFO, or a symlink to one, as data.path or checkpoint.init_from is refused at once, before
//    it is opened (opening a FIFO blocks until a writer comes), and the worker is free after;
//  - a read that never returns: the worker's fault hook FSDPD_TEST_WEDGE_READ=<path> makes
//    opening that data file block forever, ignoring cancellation, as a read from a hung network
//    file system does (worker/data/window_data_loader.cc honours it only when set). The
//    SCHEDULED deadline then fails the attempt naming the step it hangs in, the retry runs on
//    another worker, and the wedged worker, cancelled and still stuck after --cancel-grace,
//    reports itself unhealthy (shown by fsdpctl workers) and exits with status 3 for its
//    supervisor to restart it;
//  - a checkpoint root the worker cannot write (a read-only bind mount in the worker's own mount
//    namespace) is reported at registration; no job is placed there, and a job that could only
//    run there waits with that reason. A root that turns read-only mid-run fails the attempt as
//    the worker's fault: it is retried on another worker.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <thread>

#include "tests/integration/process_harness.h"

namespace fsdpd::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

// The coordinator's SCHEDULED deadline in Cluster::StartCoordinator: its heartbeat timeout
// (5 s) plus the rendezvous Get timeout (30 s).
constexpr seconds kStartTimeout{35};
// --cancel-grace of the workers with the fault hook.
constexpr seconds kCancelGrace{2};
// The exit status of a worker that gave up on a wedged attempt (worker/main.cc).
constexpr int kWedgedExitCode = 3;

struct JobYaml {
  std::string data = "{source: synthetic, seq_len: 16}";
  std::string init_from;
  int64_t steps = 3;
  int64_t checkpoint_every = 0;
  int max_restarts = 0;
};

std::string SpecYaml(const std::string& name, const JobYaml& job) {
  std::ostringstream yaml;
  yaml << "name: " << name << "\n"
       << "model: {vocab: 256, dim: 32, layers: 1, heads: 2, ffn_mult: 2}\n"
       << "data: " << job.data << "\n"
       << "train: {batch_size: 2, steps: " << job.steps << ", lr: 1.0e-3, seed: 3}\n"
       << "parallel: {world_size: 1, device: cpu, param_dtype: fp32, reduce_dtype: fp32}\n"
       << "checkpoint: {every_steps: " << job.checkpoint_every << ", keep: 2"
       << (job.init_from.empty() ? "" : ", init_from: " + job.init_from) << "}\n"
       << "profile: {steps: 0}\n"
       << "max_restarts: " << job.max_restarts << "\n";
  return yaml.str();
}

class WedgedWorkerTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(cluster_.StartCoordinator()); }
  void TearDown() override {
    if (HasFailure()) std::cerr << cluster_.Logs();
  }

  // How a worker sees its checkpoint root.
  enum class Root {
    kPlain,
    // Bound onto itself in the worker's own mount namespace, read-only (EROFS, which even root
    // cannot write) or writable until Remount(); the rest of the machine sees it unchanged.
    kReadOnly,
    kRemountable,
  };
  struct WorkerOptions {
    std::string hostname{};
    std::vector<std::string> environment{};  // NAME=value, through env(1)
    std::string checkpoint_root{};           // default: <dir>/checkpoints
    Root root = Root::kPlain;
  };
  ChildProcess& StartWorker(const WorkerOptions& options) {
    const std::string root =
        options.checkpoint_root.empty() ? cluster_.dir() + "/checkpoints" : options.checkpoint_root;
    std::vector<std::string> argv;
    if (options.root != Root::kPlain) {
      const std::string mount =
          options.root == Root::kReadOnly ? "mount --bind -o ro" : "mount --bind";
      argv = {"/usr/bin/unshare",
              "--user",
              "--map-root-user",
              "--mount",
              "/bin/sh",
              "-c",
              mount + " \"$0\" \"$0\" && exec \"$@\"",
              root};
    }
    // --cancel-grace through its environment variable.
    argv.insert(argv.end(), {"/usr/bin/env",
                             "FSDPD_CANCEL_GRACE=" + std::to_string(kCancelGrace.count()) + "s"});
    argv.insert(argv.end(), options.environment.begin(), options.environment.end());
    for (const std::string& arg :
         {BuildPath("worker/fsdpd-worker"), std::string("--coordinator"), cluster_.address(),
          std::string("--device"), std::string("cpu"), std::string("--checkpoint-root"), root,
          std::string("--hostname"), options.hostname, std::string("--heartbeat-interval"),
          std::string("500ms"), std::string("--allowed-root"), cluster_.dir()}) {
      argv.push_back(arg);
    }
    workers_.push_back(std::make_unique<ChildProcess>(
        argv, cluster_.dir() + "/worker-" + options.hostname + ".log"));
    return *workers_.back();
  }
  // Makes the root of a Root::kRemountable worker read-only ("ro") or writable ("rw") for it.
  // Remounting read-only fails (EBUSY) while the worker has a file open for writing there, as
  // when a checkpoint is being written: tried again until it takes, for up to 10 s.
  void Remount(const ChildProcess& worker, const std::string& root, const std::string& mode) {
    const Clock::time_point until = Clock::now() + seconds(10);
    CommandResult remounted;
    do {
      remounted =
          RunCommand({"/usr/bin/nsenter", "-t", std::to_string(worker.pid()), "-U", "-m",
                      "--preserve-credentials", "/bin/mount", "-o", "remount,bind," + mode, root},
                     seconds(10));
    } while (remounted.exit_code != 0 && remounted.err.find("busy") != std::string::npos &&
             Clock::now() < until);
    ASSERT_EQ(remounted.exit_code, 0) << remounted.err;
  }
  static bool PrivateMountsWork() {
    return RunCommand({"/usr/bin/unshare", "--user", "--map-root-user", "--mount", "/bin/true"},
                      seconds(10))
               .exit_code == 0;
  }

  // A worker whose data reads of `path` never return.
  ChildProcess& StartWedgingWorker(const std::string& hostname, const std::string& path) {
    return StartWorker({hostname, {"FSDPD_TEST_WEDGE_READ=" + path}});
  }

  // fsdpctl --json workers, the entry with this hostname (null if none).
  nlohmann::json Worker(const std::string& hostname) {
    nlohmann::json listed = cluster_.CtlJson({"workers"});
    if (listed.is_null()) return nullptr;
    for (const auto& worker : listed["workers"]) {
      if (worker.value("hostname", "") == hostname) return worker;
    }
    return nullptr;
  }
  nlohmann::json WaitForWorker(const std::string& hostname,
                               const std::function<bool(const nlohmann::json&)>& predicate,
                               milliseconds timeout) {
    const Clock::time_point until = Clock::now() + timeout;
    nlohmann::json worker;
    while (true) {
      worker = Worker(hostname);
      if (!worker.is_null() && predicate(worker)) return worker;
      if (Clock::now() >= until) return worker;
      std::this_thread::sleep_for(milliseconds(100));
    }
  }

  std::string Submit(const std::string& name, const JobYaml& job) {
    return cluster_.SubmitJob(cluster_.WriteSpec(name, SpecYaml(name, job)));
  }

  // A regular text file inside the allowed root, by its canonical path.
  std::string TextFile(const std::string& name) {
    const std::string path = cluster_.dir() + "/" + name;
    WriteFile(path, std::string(400, 'a') + "the quick brown fox jumps over the lazy dog\n");
    return std::filesystem::canonical(path).string();
  }
  std::string Fifo(const std::string& name) {
    const std::string path = cluster_.dir() + "/" + name;
    EXPECT_EQ(mkfifo(path.c_str(), 0600), 0) << path;
    return path;
  }

  // A job refused at once (not after a deadline) for `path`, and its worker free again.
  void ExpectRefusedAtOnce(const std::string& id, const std::string& path) {
    ASSERT_FALSE(id.empty());
    nlohmann::json done = cluster_.WaitForState(id, "FAILED", seconds(20));
    ASSERT_EQ(done.value("state", ""), "FAILED") << done.dump();
    const std::string reason = done.value("reason", "");
    EXPECT_NE(reason.find(path), std::string::npos) << reason;
    EXPECT_NE(reason.find("not a regular file"), std::string::npos) << reason;
    EXPECT_NE(reason.find("not retried"), std::string::npos) << reason;
    EXPECT_EQ(done.value("attempt", 0), 1) << "bad input must not be retried";
    EXPECT_TRUE(cluster_.WaitForWorkers(1, "IDLE", seconds(10)));
  }

  Cluster cluster_{0};
  std::vector<std::unique_ptr<ChildProcess>> workers_;
};

TEST_F(WedgedWorkerTest, FifoAsDataPathIsRefusedAtOnce) {
  StartWorker({"fifo-worker"});
  ASSERT_TRUE(cluster_.WaitForWorkers(1, "IDLE", seconds(30)));
  const std::string fifo = Fifo("data.fifo");
  JobYaml job;
  job.data = "{source: text, path: " + fifo + ", seq_len: 16}";
  job.max_restarts = 2;
  ExpectRefusedAtOnce(Submit("fifo-data", job), fifo);
}

TEST_F(WedgedWorkerTest, FifoAsInitFromIsRefusedAtOnce) {
  StartWorker({"fifo-worker"});
  ASSERT_TRUE(cluster_.WaitForWorkers(1, "IDLE", seconds(30)));
  const std::string fifo = Fifo("init.fifo");
  JobYaml job;
  job.init_from = fifo;
  job.max_restarts = 2;
  ExpectRefusedAtOnce(Submit("fifo-init", job), fifo);
}

TEST_F(WedgedWorkerTest, SymlinkToAFifoIsRefusedAtOnce) {
  StartWorker({"fifo-worker"});
  ASSERT_TRUE(cluster_.WaitForWorkers(1, "IDLE", seconds(30)));
  const std::string fifo = Fifo("hidden.fifo");
  const std::string link = cluster_.dir() + "/corpus.txt";
  std::filesystem::create_symlink(fifo, link);
  JobYaml job;
  job.data = "{source: text, path: " + link + ", seq_len: 16}";
  job.max_restarts = 2;
  ExpectRefusedAtOnce(Submit("fifo-link", job), link);
}

// A rank that hangs before its first step: the SCHEDULED deadline fails the attempt with the
// step it hangs in, the retry runs on a healthy worker, and the hung worker gives up.
TEST_F(WedgedWorkerTest, HungReadFailsTheAttemptByTheDeadlineAndTheRetryRunsElsewhere) {
  const std::string data = TextFile("hung.txt");
  ChildProcess& wedged = StartWedgingWorker("wedged", data);
  ASSERT_TRUE(cluster_.WaitForWorkers(1, "IDLE", seconds(30)));
  JobYaml job;
  job.data = "{source: text, path: " + data + ", seq_len: 16}";
  job.max_restarts = 1;
  const std::string id = Submit("hung", job);
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(wedged.WaitForLog("FSDPD_TEST_WEDGE_READ", seconds(30)))
      << "the attempt never reached the hung read";
  // Only now a healthy worker, so the first attempt is certainly on the wedged one.
  StartWorker({"healthy"});

  nlohmann::json done = cluster_.WaitForState(id, "SUCCEEDED", kStartTimeout + seconds(60));
  ASSERT_EQ(done.value("state", ""), "SUCCEEDED") << done.dump();
  EXPECT_EQ(done.value("attempt", 0), 2);
  std::string failed_reason;
  for (const auto& change : done["transitions"]) {
    if (change.value("state", "") == "RETRYING") failed_reason = change.value("reason", "");
  }
  // The reason names the rank, its worker and the step it hung in.
  EXPECT_NE(failed_reason.find("rank 0"), std::string::npos) << failed_reason;
  EXPECT_NE(failed_reason.find("opening data.path"), std::string::npos) << failed_reason;
  EXPECT_NE(failed_reason.find(data), std::string::npos) << failed_reason;
  const nlohmann::json healthy = Worker("healthy");
  ASSERT_FALSE(healthy.is_null());
  ASSERT_EQ(done["worker_ids"].size(), 1u);
  EXPECT_EQ(done["worker_ids"][0], healthy["id"]);

  // The failed attempt was cancelled on the wedged worker, which cannot honour it: after
  // --cancel-grace it reports itself unhealthy and exits for its supervisor to restart it.
  EXPECT_TRUE(wedged.WaitForExit(seconds(30)));
  EXPECT_EQ(wedged.exit_code(), kWedgedExitCode);
  const nlohmann::json reported = Worker("wedged");
  ASSERT_FALSE(reported.is_null());
  EXPECT_NE(reported.value("unhealthy", "").find("opening data.path"), std::string::npos)
      << reported.dump();
}

// fsdpctl cancel of an attempt stuck in a read: the worker is reported unhealthy within the
// bound, is given no more work, and the next job runs on another worker.
TEST_F(WedgedWorkerTest, CancelledHungReadMakesTheWorkerReportItselfUnhealthy) {
  const std::string data = TextFile("hung.txt");
  ChildProcess& wedged = StartWedgingWorker("wedged", data);
  ASSERT_TRUE(cluster_.WaitForWorkers(1, "IDLE", seconds(30)));
  JobYaml job;
  job.data = "{source: text, path: " + data + ", seq_len: 16}";
  job.steps = 100000;  // without the hang it would still be running when cancelled
  const std::string id = Submit("hung", job);
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(wedged.WaitForLog("FSDPD_TEST_WEDGE_READ", seconds(30)))
      << "the attempt never reached the hung read";
  StartWorker({"healthy"});
  ASSERT_TRUE(cluster_.WaitForWorkers(1, "IDLE", seconds(30)));

  const Clock::time_point cancelled = Clock::now();
  CommandResult cancel = cluster_.Ctl({"cancel", id});
  ASSERT_EQ(cancel.exit_code, 0) << cancel.err;
  const nlohmann::json reported = WaitForWorker(
      "wedged", [](const nlohmann::json& w) { return !w.value("unhealthy", "").empty(); },
      kCancelGrace + seconds(10));
  const auto took = std::chrono::duration_cast<milliseconds>(Clock::now() - cancelled);
  const std::string unhealthy = reported.is_null() ? "" : reported.value("unhealthy", "");
  ASSERT_FALSE(unhealthy.empty()) << "no unhealthy report within " << took.count() << " ms\n"
                                  << reported.dump();
  RecordProperty("unhealthy_reported_after_ms", std::to_string(took.count()));
  std::cout << "unhealthy reported " << took.count() << " ms after fsdpctl cancel (grace "
            << milliseconds(kCancelGrace).count() << " ms)" << std::endl;
  // The bound: --cancel-grace, plus a watchdog period and the report's trip.
  EXPECT_LT(took, kCancelGrace + seconds(3)) << took.count() << " ms";
  EXPECT_NE(unhealthy.find(id), std::string::npos) << unhealthy;
  EXPECT_NE(unhealthy.find("opening data.path"), std::string::npos) << unhealthy;
  EXPECT_TRUE(wedged.WaitForExit(seconds(30)));
  EXPECT_EQ(wedged.exit_code(), kWedgedExitCode);
  EXPECT_EQ(cluster_.Status(id).value("state", ""), "CANCELLED");

  const std::string next = Submit("next", JobYaml{});
  ASSERT_FALSE(next.empty());
  nlohmann::json done = cluster_.WaitForState(next, "SUCCEEDED", seconds(60));
  ASSERT_EQ(done.value("state", ""), "SUCCEEDED") << done.dump();
  const nlohmann::json healthy = Worker("healthy");
  ASSERT_FALSE(healthy.is_null());
  ASSERT_EQ(done["worker_ids"].size(), 1u);
  EXPECT_EQ(done["worker_ids"][0], healthy["id"]);
}

// A checkpoint root the worker cannot write is the worker's fault: it says so when it
// registers, gets no job, and the job waits with that reason until a worker that can write
// comes.
TEST_F(WedgedWorkerTest, ReadOnlyCheckpointRootKeepsJobsOffTheWorker) {
  if (!PrivateMountsWork()) {
    GTEST_SKIP() << "this host cannot make a private mount namespace (unshare --user --mount)";
  }
  const std::string read_only_root = cluster_.dir() + "/read-only-checkpoints";
  std::filesystem::create_directories(read_only_root);
  StartWorker({"read-only", {}, read_only_root, Root::kReadOnly});
  ASSERT_TRUE(cluster_.WaitForWorkers(1, "IDLE", seconds(30)));
  const nlohmann::json reported = WaitForWorker(
      "read-only",
      [](const nlohmann::json& w) { return !w.value("checkpoint_root_error", "").empty(); },
      seconds(10));
  ASSERT_FALSE(reported.is_null());
  const std::string why = reported.value("checkpoint_root_error", "");
  EXPECT_NE(why.find(read_only_root), std::string::npos) << reported.dump();
  EXPECT_NE(why.find("Read-only file system"), std::string::npos) << reported.dump();

  JobYaml job;
  job.steps = 6;
  job.checkpoint_every = 2;
  const std::string id = Submit("checkpointing", job);
  ASSERT_FALSE(id.empty());
  nlohmann::json waiting = cluster_.WaitForJob(
      id,
      [](const nlohmann::json& s) {
        return s.value("reason", "").find("checkpoint root") != std::string::npos;
      },
      seconds(10));
  EXPECT_EQ(waiting.value("state", ""), "PENDING") << waiting.dump();
  EXPECT_NE(waiting.value("reason", "").find(reported.value("id", "?")), std::string::npos)
      << waiting.dump();

  StartWorker({"writable"});
  nlohmann::json done = cluster_.WaitForState(id, "SUCCEEDED", seconds(60));
  ASSERT_EQ(done.value("state", ""), "SUCCEEDED") << done.dump();
  EXPECT_EQ(done.value("attempt", 0), 1);
  const nlohmann::json writable = Worker("writable");
  ASSERT_FALSE(writable.is_null());
  ASSERT_EQ(done["worker_ids"].size(), 1u);
  EXPECT_EQ(done["worker_ids"][0], writable["id"]);
}

// A root that goes read-only under a running job: the checkpoint write fails the attempt as the
// worker's fault, so it is retried, and on another worker, since the worker reports its root
// before the attempt's result. Once the root is writable again the worker says so by itself.
TEST_F(WedgedWorkerTest, ARootThatTurnsReadOnlyMidRunIsTheWorkersFault) {
  if (!PrivateMountsWork()) {
    GTEST_SKIP() << "this host cannot make a private mount namespace (unshare --user --mount)";
  }
  const std::string root = cluster_.dir() + "/remountable-checkpoints";
  std::filesystem::create_directories(root);
  ChildProcess& first = StartWorker({"turns-read-only", {}, root, Root::kRemountable});
  ASSERT_TRUE(cluster_.WaitForWorkers(1, "IDLE", seconds(30)));
  JobYaml job;
  job.steps = 100000;  // cancelled once the retry runs
  job.checkpoint_every = 5;
  job.max_restarts = 1;
  const std::string id = Submit("checkpointing", job);
  ASSERT_FALSE(id.empty());
  nlohmann::json running = cluster_.WaitForJob(
      id, [](const nlohmann::json& s) { return s.value("step", int64_t{0}) > 5; }, seconds(60));
  ASSERT_GT(running.value("step", int64_t{0}), 5) << running.dump();

  Remount(first, root, "ro");
  StartWorker({"writable"});
  nlohmann::json retried = cluster_.WaitForJob(
      id,
      [](const nlohmann::json& s) {
        return s.value("attempt", 0) == 2 && s.value("state", "") == "RUNNING";
      },
      seconds(60));
  ASSERT_EQ(retried.value("state", ""), "RUNNING") << retried.dump();
  std::string failed_reason;
  for (const auto& change : retried["transitions"]) {
    if (change.value("state", "") == "RETRYING") failed_reason = change.value("reason", "");
  }
  EXPECT_NE(failed_reason.find("checkpoint of step"), std::string::npos) << failed_reason;
  EXPECT_NE(failed_reason.find("Read-only file system"), std::string::npos) << failed_reason;
  EXPECT_EQ(failed_reason.find("not retried"), std::string::npos) << failed_reason;
  const nlohmann::json writable = Worker("writable");
  ASSERT_FALSE(writable.is_null());
  ASSERT_EQ(retried["worker_ids"].size(), 1u);
  EXPECT_EQ(retried["worker_ids"][0], writable["id"]);
  const nlohmann::json reported = Worker("turns-read-only");
  ASSERT_FALSE(reported.is_null());
  EXPECT_NE(reported.value("checkpoint_root_error", "").find("Read-only file system"),
            std::string::npos)
      << reported.dump();

  // Fixed: the worker's next probe (every 30 s while the root is unwritable) says so. The wait
  // covers that period twice over: on a loaded host a lagging coordinator has been seen to mark
  // the workers lost in between, and a worker's health comes back with its next registration.
  Remount(first, root, "rw");
  const nlohmann::json fixed = WaitForWorker(
      "turns-read-only",
      [](const nlohmann::json& w) { return w.value("checkpoint_root_error", "?").empty(); },
      seconds(120));
  EXPECT_EQ(fixed.value("checkpoint_root_error", "?"), "") << fixed.dump();
  EXPECT_EQ(cluster_.Ctl({"cancel", id}).exit_code, 0);
}

}  // namespace
}  // namespace fsdpd::testing
