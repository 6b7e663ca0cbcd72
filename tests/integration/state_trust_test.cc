// The coordinator's state folder and fsdpctl's output, tried as an attacker (or an unlucky
// operator) would, through the real binaries: a second fsdpd on the same --state-dir, a lock
// left by kill -9, a cluster-id file of random bytes or a FIFO, a truncated store without a
// cluster-id, `fsdpctl export -o` onto stdout, a FIFO, a device or a directory, and a job name
// that is not UTF-8, sent through fsdpctl and as raw bytes.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "fsdpd/v1/jobs.grpc.pb.h"
#include "tests/integration/process_harness.h"

namespace fsdpd::testing {
namespace {

namespace fs = std::filesystem;
using std::chrono::seconds;
using ::testing::HasSubstr;
using ::testing::Not;

// A coordinator started by a test, on a port the kernel chooses, with its address once it serves.
struct Coordinator {
  std::unique_ptr<ChildProcess> process;
  std::string address;  // "" when it did not serve
};

// Starts fsdpd on `state_dir` and waits until it serves or exits, whichever comes first.
Coordinator StartCoordinator(const std::string& state_dir, const std::string& log) {
  Coordinator started;
  started.process = std::make_unique<ChildProcess>(
      std::vector<std::string>{BuildPath("server/fsdpd"), "--listen", "127.0.0.1:0",
                               "--metrics-listen", "", "--state-dir", state_dir},
      log);
  const auto until = std::chrono::steady_clock::now() + seconds(30);
  const std::regex listening("fsdpd listening on (\\S+)");
  while (std::chrono::steady_clock::now() < until) {
    std::smatch match;
    const std::string text = ReadFile(log);
    if (std::regex_search(text, match, listening)) {
      started.address = match[1];
      return started;
    }
    if (!started.process->Running()) return started;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return started;
}

std::set<std::string> Listing(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.insert(entry.path().filename());
  return names;
}

class StateFolderTest : public ::testing::Test {
 protected:
  void SetUp() override { IsolateClientEnvironment(dir_.path()); }
  std::string Log(const std::string& name) const { return dir_.path() + "/" + name + ".log"; }
  // A state folder with a store and a cluster-id, written by a coordinator stopped cleanly.
  std::string MakeStateFolder() {
    const std::string state = dir_.path() + "/state";
    Coordinator first = StartCoordinator(state, Log("setup"));
    EXPECT_FALSE(first.address.empty()) << ReadFile(Log("setup"));
    first.process->Signal(SIGTERM);
    EXPECT_TRUE(first.process->WaitForExit(seconds(30)));
    EXPECT_TRUE(fs::exists(state + "/cluster-id"));
    EXPECT_GT(fs::file_size(state + "/fsdpd.db"), 0u);
    return state;
  }
  TempDir dir_;
};

TEST_F(StateFolderTest, ASecondCoordinatorOnTheSameStateDirIsRefusedNamingTheFirst) {
  const std::string state = dir_.path() + "/state";
  Coordinator first = StartCoordinator(state, Log("first"));
  ASSERT_FALSE(first.address.empty()) << ReadFile(Log("first"));

  Coordinator second = StartCoordinator(state, Log("second"));
  EXPECT_TRUE(second.address.empty()) << "two coordinators serve one state folder:\n"
                                      << ReadFile(Log("second"));
  ASSERT_TRUE(second.process->WaitForExit(seconds(30)));
  EXPECT_EQ(second.process->exit_code(), 1);
  const std::string refusal = ReadFile(Log("second"));
  EXPECT_THAT(refusal, HasSubstr("pid " + std::to_string(first.process->pid())));
  EXPECT_THAT(refusal, HasSubstr(first.address));
  EXPECT_THAT(refusal, HasSubstr(state + "/fsdpd.lock"));
  EXPECT_THAT(refusal, Not(HasSubstr("job store"))) << "the refused one loaded the store";

  // The first one serves on, and its jobs are its own.
  CommandResult listed = RunCommand(
      {BuildPath("client/fsdpctl"), "--coordinator", first.address, "list"}, seconds(30));
  EXPECT_EQ(listed.exit_code, 0) << listed.err;
}

TEST_F(StateFolderTest, ALockLeftByKillNineDoesNotBlockTheNextStart) {
  const std::string state = dir_.path() + "/state";
  Coordinator first = StartCoordinator(state, Log("first"));
  ASSERT_FALSE(first.address.empty()) << ReadFile(Log("first"));
  const std::string lock = state + "/fsdpd.lock";
  EXPECT_THAT(ReadFile(lock), HasSubstr("pid " + std::to_string(first.process->pid())));
  EXPECT_THAT(ReadFile(lock), HasSubstr("listen " + first.address));

  first.process->Signal(SIGKILL);
  ASSERT_TRUE(first.process->WaitForExit(seconds(30)));
  ASSERT_TRUE(fs::exists(lock)) << "kill -9 leaves the file; the kernel dropped the lock";

  Coordinator next = StartCoordinator(state, Log("next"));
  ASSERT_FALSE(next.address.empty()) << ReadFile(Log("next"));
  EXPECT_THAT(ReadFile(lock), HasSubstr("pid " + std::to_string(next.process->pid())));
  EXPECT_THAT(ReadFile(lock), HasSubstr("listen " + next.address));

  // A clean stop removes it.
  next.process->Signal(SIGTERM);
  ASSERT_TRUE(next.process->WaitForExit(seconds(30)));
  EXPECT_EQ(next.process->exit_code(), 0);
  EXPECT_FALSE(fs::exists(lock));
}

// A restart right after SIGTERM: the old coordinator still holds the lock while it drains its
// streams and flushes the store. It marks the lock file `stopping`, and the new one waits for it
// (up to StateLock::kStoppingWaitSeconds) instead of refusing. The old one is frozen with SIGSTOP
// once it says it is stopping, so the new one certainly finds the lock held.
TEST_F(StateFolderTest, ARestartWhileTheOldCoordinatorIsStoppingWaitsForIt) {
  const std::string state = dir_.path() + "/state";
  const std::string lock = state + "/fsdpd.lock";
  Coordinator first = StartCoordinator(state, Log("first"));
  ASSERT_FALSE(first.address.empty()) << ReadFile(Log("first"));
  first.process->Signal(SIGTERM);
  const auto until = std::chrono::steady_clock::now() + seconds(30);
  while (ReadFile(lock).find("stopping") == std::string::npos && first.process->Running() &&
         std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  first.process->Signal(SIGSTOP);
  if (!first.process->Running() || ReadFile(lock).find("stopping") == std::string::npos) {
    first.process->Signal(SIGCONT);
    GTEST_SKIP() << "the first coordinator exited before it could be frozen while stopping";
  }

  auto next = std::make_unique<ChildProcess>(
      std::vector<std::string>{BuildPath("server/fsdpd"), "--listen", "127.0.0.1:0",
                               "--metrics-listen", "", "--state-dir", state},
      Log("next"));
  // It waits: still running, not serving, and not refused.
  EXPECT_FALSE(next->WaitForLog("fsdpd listening on", seconds(2))) << ReadFile(Log("next"));
  EXPECT_TRUE(next->Running()) << "refused while the old one was stopping:\n"
                               << ReadFile(Log("next"));
  first.process->Signal(SIGCONT);
  ASSERT_TRUE(first.process->WaitForExit(seconds(30)));
  EXPECT_TRUE(next->WaitForLog("fsdpd listening on", seconds(30))) << ReadFile(Log("next"));
  EXPECT_THAT(ReadFile(lock), HasSubstr("pid " + std::to_string(next->pid())));
  EXPECT_THAT(ReadFile(lock), Not(HasSubstr("stopping")));
  next->Signal(SIGTERM);
  EXPECT_TRUE(next->WaitForExit(seconds(30)));
}

TEST_F(StateFolderTest, AClusterIdOfRandomBytesOrAFifoIsRefusedByName) {
  const std::string state = MakeStateFolder();
  const std::string marker = state + "/cluster-id";
  std::mt19937 random(35);
  std::string garbage(64, '\0');
  for (char& c : garbage) c = static_cast<char>(random());
  WriteFile(marker, garbage);

  Coordinator refused = StartCoordinator(state, Log("random"));
  EXPECT_TRUE(refused.address.empty()) << "started with a cluster-id of random bytes";
  ASSERT_TRUE(refused.process->WaitForExit(seconds(30)));
  EXPECT_EQ(refused.process->exit_code(), 1);
  const std::string refusal = ReadFile(Log("random"));
  EXPECT_THAT(refusal, HasSubstr(marker + " does not hold a cluster id"));
  EXPECT_THAT(refusal, HasSubstr("UUID"));
  EXPECT_EQ(ReadFile(marker), garbage) << "the refused start rewrote the cluster-id";

  // A FIFO there is refused too, without waiting for a writer.
  fs::remove(marker);
  ASSERT_EQ(mkfifo(marker.c_str(), 0644), 0);
  Coordinator fifo = StartCoordinator(state, Log("fifo"));
  EXPECT_TRUE(fifo.address.empty());
  ASSERT_TRUE(fifo.process->WaitForExit(seconds(30))) << "blocked on a cluster-id FIFO";
  EXPECT_EQ(fifo.process->exit_code(), 1);
  EXPECT_THAT(ReadFile(Log("fifo")), HasSubstr(marker + " is not a regular file"));
}

TEST_F(StateFolderTest, ATruncatedStoreWithoutAClusterIdLeavesTheFolderAsItWas) {
  const std::string state = MakeStateFolder();
  fs::remove(state + "/cluster-id");
  const std::string database = state + "/fsdpd.db";
  fs::resize_file(database, fs::file_size(database) / 2);
  const std::string damaged = ReadFile(database);
  const std::set<std::string> before = Listing(state);

  Coordinator refused = StartCoordinator(state, Log("truncated"));
  EXPECT_TRUE(refused.address.empty()) << "started on a truncated store";
  ASSERT_TRUE(refused.process->WaitForExit(seconds(30)));
  EXPECT_NE(refused.process->exit_code(), 0);
  EXPECT_THAT(ReadFile(Log("truncated")), HasSubstr(database));
  EXPECT_FALSE(fs::exists(state + "/cluster-id"))
      << "a failed start gave the damaged store a new cluster id:\n"
      << ReadFile(Log("truncated"));
  EXPECT_EQ(Listing(state), before);
  EXPECT_EQ(ReadFile(database), damaged);
}

// One cluster with a job that trained and uploaded its model, for the export attacks.
class ExportTargetTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cluster_ = new Cluster(1);
    IsolateClientEnvironment(cluster_->dir());
    ASSERT_TRUE(cluster_->StartCoordinator());
    ASSERT_TRUE(cluster_->StartWorkers());
    job_ = cluster_->SubmitJob(cluster_->WriteSpec("exported", TinySpec("exported", 4, 1)));
    ASSERT_FALSE(job_.empty());
    nlohmann::json done = cluster_->WaitForState(job_, "SUCCEEDED", seconds(120));
    ASSERT_EQ(done.value("state", ""), "SUCCEEDED") << done.dump() << cluster_->Logs();
    const std::string model = cluster_->dir() + "/model.safetensors";
    CommandResult exported = cluster_->Ctl({"export", job_, "-o", model});
    ASSERT_EQ(exported.exit_code, 0) << exported.err;
    model_ = ReadFile(model);
    ASSERT_GT(model_.size(), 8u);
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override {
    if (cluster_ == nullptr || job_.empty() || model_.empty()) GTEST_SKIP() << "no exported job";
  }
  // fsdpctl export JOB -o TARGET, run inside `cwd`.
  CommandResult Export(const std::string& cwd, const std::string& target) {
    return RunCommand(
        {"/bin/sh", "-c",
         "cd '" + cwd + "' && exec '" + BuildPath("client/fsdpctl") + "' --coordinator " +
             cluster_->address() + " export " + job_ + " -o '" + target + "'"},
        seconds(30));
  }

  static Cluster* cluster_;
  static std::string job_;
  static std::string model_;
};
Cluster* ExportTargetTest::cluster_ = nullptr;
std::string ExportTargetTest::job_;
std::string ExportTargetTest::model_;

TEST_F(ExportTargetTest, DashWritesTheModelToStdout) {
  const std::string cwd = cluster_->dir() + "/cwd";
  fs::create_directories(cwd);
  CommandResult result = Export(cwd, "-");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.out.size(), model_.size());
  EXPECT_TRUE(result.out == model_) << "stdout is not the model";
  EXPECT_THAT(result.err, HasSubstr("to stdout"));
  EXPECT_FALSE(fs::exists(cwd + "/-")) << "-o - wrote a file named '-'";
}

TEST_F(ExportTargetTest, ATargetThatIsNotARegularFileIsRefusedWithoutBlocking) {
  const std::string fifo = cluster_->dir() + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  CommandResult result = Export(cluster_->dir(), fifo);
  EXPECT_EQ(result.exit_code, 1) << "(-1: killed after 30 s, blocked)\n" << result.err;
  EXPECT_THAT(result.err, HasSubstr("-o " + fifo + " is a FIFO"));
  struct stat info {};
  ASSERT_EQ(lstat(fifo.c_str(), &info), 0);
  EXPECT_TRUE(S_ISFIFO(info.st_mode)) << "the FIFO was replaced";
  EXPECT_FALSE(fs::exists(fifo + ".partial"));

  // Through a symbolic link, the link's target is what counts.
  const std::string link = cluster_->dir() + "/link-to-fifo";
  fs::create_symlink(fifo, link);
  result = Export(cluster_->dir(), link);
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.err, HasSubstr("-o " + link + " (" + fifo + ") is a FIFO"));
  EXPECT_TRUE(fs::is_symlink(link));

  // Devices and sockets of the test's own (never the host's /dev: a failing fsdpctl run as root
  // would replace them).
  const std::string device = cluster_->dir() + "/null-device";
  if (mknod(device.c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0) {  // needs root
    result = Export(cluster_->dir(), device);
    EXPECT_EQ(result.exit_code, 1);
    EXPECT_THAT(result.err, HasSubstr("-o " + device + " is a character device"));
    ASSERT_EQ(lstat(device.c_str(), &info), 0);
    EXPECT_TRUE(S_ISCHR(info.st_mode)) << "the device node was replaced";
  }
  const std::string socket_path = cluster_->dir() + "/socket";
  const int listener = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::snprintf(address.sun_path, sizeof(address.sun_path), "%s", socket_path.c_str());
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  result = Export(cluster_->dir(), socket_path);
  close(listener);
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.err, HasSubstr("-o " + socket_path + " is a socket"));
  ASSERT_EQ(lstat(socket_path.c_str(), &info), 0);
  EXPECT_TRUE(S_ISSOCK(info.st_mode)) << "the socket was replaced";

  const std::string folder = cluster_->dir() + "/folder";
  fs::create_directories(folder);
  result = Export(cluster_->dir(), folder);
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.err, HasSubstr("-o " + folder + " is a directory"));
  EXPECT_TRUE(fs::is_empty(folder));

  // A regular file behind a link is replaced, and the link stays.
  const std::string real = cluster_->dir() + "/real.safetensors";
  const std::string to_real = cluster_->dir() + "/link-to-real";
  WriteFile(real, "old");
  fs::create_symlink(real, to_real);
  result = Export(cluster_->dir(), to_real);
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_TRUE(fs::is_symlink(to_real));
  EXPECT_TRUE(ReadFile(real) == model_);
}

// A spec whose name is not UTF-8, through fsdpctl and as the raw bytes of a request.
TEST_F(StateFolderTest, ANameThatIsNotUtf8IsInvalidArgumentNamingTheField) {
  Coordinator coordinator = StartCoordinator(dir_.path() + "/state", Log("fsdpd"));
  ASSERT_FALSE(coordinator.address.empty()) << ReadFile(Log("fsdpd"));
  std::string spec = TinySpec("bad\xff\xfename", 4, 1);
  const std::string spec_path = dir_.path() + "/spec.yaml";
  WriteFile(spec_path, spec);
  for (const char* mode : {"submit", "--dry-run"}) {
    std::vector<std::string> argv{BuildPath("client/fsdpctl"), "--coordinator", coordinator.address,
                                  "submit", spec_path};
    if (std::string(mode) == "--dry-run") argv.push_back("--dry-run");
    CommandResult result = RunCommand(argv, seconds(30));
    EXPECT_EQ(result.exit_code, 1) << mode;
    EXPECT_THAT(result.err, HasSubstr("name: is not UTF-8 text (byte 0xff at offset 3)")) << mode;
    EXPECT_THAT(result.err, Not(HasSubstr("error code"))) << mode;
  }

  // The same request as bytes, past any client-side check.
  v1::SubmitJobRequest request;
  request.mutable_spec()->set_name("bad__name");
  std::string bytes = request.SerializeAsString();
  const size_t at = bytes.find("bad__name");
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at + 3, 2, "\xff\xfe");
  grpc::Slice slice(bytes);
  grpc::ByteBuffer raw(&slice, 1);
  auto channel = grpc::CreateChannel(coordinator.address, grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::CompletionQueue queue;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + seconds(10));
  auto call = stub.PrepareUnaryCall(&context, "/fsdpd.v1.JobService/SubmitJob", raw, &queue);
  call->StartCall();
  grpc::ByteBuffer response;
  grpc::Status status;
  call->Finish(&response, &status, reinterpret_cast<void*>(1));
  void* tag = nullptr;
  bool ok = false;
  ASSERT_TRUE(queue.Next(&tag, &ok));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr("UTF-8"));
  queue.Shutdown();
  while (queue.Next(&tag, &ok)) {
  }

  // Nothing was stored, and the coordinator serves on.
  CommandResult listed = RunCommand(
      {BuildPath("client/fsdpctl"), "--coordinator", coordinator.address, "--json", "list"},
      seconds(30));
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  EXPECT_THAT(listed.out, Not(HasSubstr("job-")));
}

}  // namespace
}  // namespace fsdpd::testing
