// fsdpd-worker refuses bad flags with a message naming the flag, before it touches the network.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include "tests/integration/process_harness.h"

namespace fsdpd::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

CommandResult RunWorker(const std::vector<std::string>& flags) {
  std::vector<std::string> argv{BuildPath("worker/fsdpd-worker"), "--coordinator",
                                "127.0.0.1:" + std::to_string(FreeTcpPort())};
  argv.insert(argv.end(), flags.begin(), flags.end());
  return RunCommand(argv, std::chrono::seconds(20));
}

#ifdef FSDPD_TEST_CUDA_BUILD
// A CUDA build refuses a GPU index that no host has, naming the flag; on a GPU host cuda:0
// would start (tests/gpu cover that).
TEST(WorkerFlagsTest, CudaDeviceThatDoesNotExistIsRefused) {
  CommandResult result = RunWorker({"--device", "cuda:4095"});
  EXPECT_NE(result.exit_code, 0);
  EXPECT_THAT(result.err, HasSubstr("--device cuda:4095"));
  EXPECT_THAT(result.err, Not(HasSubstr("built without CUDA")));
}
#else
// A build without CUDA refuses any cuda device, whatever the host has, and says how to fix it.
TEST(WorkerFlagsTest, CudaDeviceNeedsACudaBuild) {
  CommandResult result = RunWorker({"--device", "cuda:0"});
  EXPECT_NE(result.exit_code, 0);
  EXPECT_THAT(result.err, HasSubstr("--device cuda:0"));
  EXPECT_THAT(result.err, HasSubstr("built without CUDA"));
}
#endif

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

TEST(WorkerFlagsTest, ShutsDownCleanlyOnSigtermWhileTheCoordinatorIsAway) {
  TempDir dir;
  ChildProcess worker({BuildPath("worker/fsdpd-worker"), "--coordinator",
                       "127.0.0.1:" + std::to_string(FreeTcpPort()), "--checkpoint-root",
                       dir.path() + "/checkpoints"},
                      dir.path() + "/worker.log");
  // Registration is blocked waiting for a coordinator that never comes; SIGTERM ends it.
  ASSERT_TRUE(worker.WaitForLog("retrying", std::chrono::seconds(20)))
      << ReadFile(worker.log_path());
  worker.Signal(SIGTERM);
  ASSERT_TRUE(worker.WaitForExit(std::chrono::seconds(3))) << ReadFile(worker.log_path());
  EXPECT_EQ(worker.exit_code(), 0) << ReadFile(worker.log_path());
  EXPECT_THAT(ReadFile(worker.log_path()), HasSubstr("shutting down"));
}

}  // namespace
}  // namespace fsdpd::testing
