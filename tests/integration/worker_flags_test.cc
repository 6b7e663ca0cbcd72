// fsdpd-worker refuses bad flags with a message naming the flag, before it touches the network.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#ifdef FSDPD_HAS_CUDA
#include <cuda_runtime_api.h>
#endif

#include "tests/integration/process_harness.h"

namespace fsdpd::testing {
namespace {

using ::testing::HasSubstr;

CommandResult RunWorker(const std::vector<std::string>& flags) {
  const UnusedPort unused;
  std::vector<std::string> argv{BuildPath("worker/fsdpd-worker"), "--coordinator",
                                unused.address()};
  argv.insert(argv.end(), flags.begin(), flags.end());
  return RunCommand(argv, std::chrono::seconds(20));
}

// How many CUDA devices this process sees; 0 in a build without CUDA.
int VisibleCudaDevices() {
#ifdef FSDPD_HAS_CUDA
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
#else
  return 0;
#endif
}

// --device cuda:0 is refused by a build without CUDA, refused by a CUDA build on a host with no
// device, and accepted (the worker starts and goes on to register) where a device is present.
TEST(WorkerFlagsTest, CudaDeviceNeedsACudaBuildAndADevice) {
#ifdef FSDPD_HAS_CUDA
  constexpr bool kCudaBuild = true;
#else
  constexpr bool kCudaBuild = false;
#endif
  if (!kCudaBuild || VisibleCudaDevices() == 0) {
    CommandResult result = RunWorker({"--device", "cuda:0"});
    EXPECT_EQ(result.exit_code, 2) << result.err;
    EXPECT_THAT(result.err, HasSubstr("--device cuda:0"));
    EXPECT_THAT(result.err, HasSubstr(kCudaBuild ? "cuda:0 does not exist (0 CUDA devices visible)"
                                                 : "built without CUDA"));
    return;
  }
  TempDir dir;
  const UnusedPort unused;
  ChildProcess worker({BuildPath("worker/fsdpd-worker"), "--device", "cuda:0", "--coordinator",
                       unused.address(), "--checkpoint-root", dir.path() + "/checkpoints"},
                      dir.path() + "/worker.log");
  ASSERT_TRUE(worker.WaitForLog("fsdpd-worker: device cuda:0", std::chrono::seconds(60)))
      << ReadFile(worker.log_path());
  worker.Signal(SIGTERM);
  ASSERT_TRUE(worker.WaitForExit(std::chrono::seconds(10))) << ReadFile(worker.log_path());
  EXPECT_EQ(worker.exit_code(), 0) << ReadFile(worker.log_path());
}

TEST(WorkerFlagsTest, UnknownDevice) {
  CommandResult result = RunWorker({"--device", "tpu"});
  EXPECT_NE(result.exit_code, 0);
  EXPECT_THAT(result.err, HasSubstr("unknown device \"tpu\""));
}

TEST(WorkerFlagsTest, BadGpuIndex) {
  CommandResult result = RunWorker({"--device", "cuda:x"});
  EXPECT_NE(result.exit_code, 0);
  EXPECT_THAT(result.err, HasSubstr("cuda:x"));
}

TEST(WorkerFlagsTest, HeartbeatIntervalMustBePositive) {
  CommandResult result = RunWorker({"--heartbeat-interval", "0s"});
  EXPECT_NE(result.exit_code, 0);
  EXPECT_THAT(result.err, HasSubstr("--heartbeat-interval"));
}

// A TCP listener on 127.0.0.1 that accepts connections and never answers: a coordinator that is
// unreachable at the gRPC level. An accepted connection shows that a client is waiting on it.
class SilentListener {
 public:
  SilentListener() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(address);
    if (fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
        listen(fd_, 8) != 0 ||
        getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
      ADD_FAILURE() << "cannot listen on 127.0.0.1: " << std::strerror(errno);
      return;
    }
    port_ = ntohs(address.sin_port);
  }
  ~SilentListener() {
    for (int connection : connections_) close(connection);
    if (fd_ >= 0) close(fd_);
  }
  int port() const { return port_; }
  // True once a client has connected, within `timeout`.
  bool WaitForConnection(std::chrono::milliseconds timeout) {
    pollfd waiting{fd_, POLLIN, 0};
    if (poll(&waiting, 1, static_cast<int>(timeout.count())) != 1) return false;
    const int connection = accept(fd_, nullptr, nullptr);
    if (connection < 0) return false;
    connections_.push_back(connection);
    return true;
  }

 private:
  int fd_ = -1;
  int port_ = 0;
  std::vector<int> connections_;
};

TEST(WorkerFlagsTest, ShutsDownCleanlyOnSigtermWhileTheCoordinatorIsAway) {
  TempDir dir;
  SilentListener coordinator;
  ASSERT_GT(coordinator.port(), 0);
  ChildProcess worker({BuildPath("worker/fsdpd-worker"), "--coordinator",
                       "127.0.0.1:" + std::to_string(coordinator.port()), "--checkpoint-root",
                       dir.path() + "/checkpoints"},
                      dir.path() + "/worker.log");
  // The worker connects only to register, so a connection means that registration is under way
  // and blocked on a coordinator that never answers; SIGTERM ends it.
  ASSERT_TRUE(coordinator.WaitForConnection(std::chrono::seconds(20)))
      << ReadFile(worker.log_path());
  worker.Signal(SIGTERM);
  ASSERT_TRUE(worker.WaitForExit(std::chrono::seconds(3))) << ReadFile(worker.log_path());
  EXPECT_EQ(worker.exit_code(), 0) << ReadFile(worker.log_path());
  EXPECT_THAT(ReadFile(worker.log_path()), HasSubstr("received signal 15; shutting down"));
}

// Without --allowed-root a worker reads job files only from its own data folder, which it
// creates; allowing every path takes an explicit `--allowed-root /`.
TEST(WorkerFlagsTest, JobPathsAreConfinedToTheDataFolderByDefault) {
  TempDir dir;
  SilentListener coordinator;
  ASSERT_GT(coordinator.port(), 0);
  const std::string data_home = dir.path() + "/xdg-data";
  setenv("XDG_DATA_HOME", data_home.c_str(), 1);
  ChildProcess worker({BuildPath("worker/fsdpd-worker"), "--coordinator",
                       "127.0.0.1:" + std::to_string(coordinator.port()), "--checkpoint-root",
                       dir.path() + "/checkpoints"},
                      dir.path() + "/worker.log");
  unsetenv("XDG_DATA_HOME");
  ASSERT_TRUE(coordinator.WaitForConnection(std::chrono::seconds(20)))
      << ReadFile(worker.log_path());
  EXPECT_THAT(ReadFile(worker.log_path()),
              HasSubstr("job paths confined to " + data_home + "/fsdpd-worker/data"));
  EXPECT_TRUE(std::filesystem::is_directory(data_home + "/fsdpd-worker/data"));

  ChildProcess open_worker({BuildPath("worker/fsdpd-worker"), "--coordinator",
                            "127.0.0.1:" + std::to_string(coordinator.port()), "--checkpoint-root",
                            dir.path() + "/checkpoints", "--allowed-root", "/"},
                           dir.path() + "/open-worker.log");
  ASSERT_TRUE(coordinator.WaitForConnection(std::chrono::seconds(20)))
      << ReadFile(open_worker.log_path());
  EXPECT_THAT(ReadFile(open_worker.log_path()), HasSubstr("job paths confined to / "));
}

}  // namespace
}  // namespace fsdpd::testing
