// The steps of an attempt that touch files must not wedge the worker: a FIFO where a data file,
// a checkpoint file or a manifest should be is refused without blocking, a data file's scan and
// a checkpoint write stop between chunks once the attempt is cancelled, and the checkpoint root
// probe says why a root cannot be written.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "formats/mapped_file.h"
#include "worker/checkpoint/checkpoint.h"
#include "worker/checkpoint/root_probe.h"
#include "worker/data/data_loader.h"

namespace fsdpd {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class BlockingStepsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "io_blocking_XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs `call` on another thread; if it has not returned within 10 s it is stuck opening
  // `fifo`, which a writer then unblocks so the test can fail instead of hanging.
  template <typename Result>
  Result WithoutBlocking(const std::string& fifo, std::function<Result()> call) {
    std::future<Result> result = std::async(std::launch::async, std::move(call));
    if (result.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
      ADD_FAILURE() << "blocked on " << fifo;
      const int writer = open(fifo.c_str(), O_WRONLY);
      if (writer >= 0) close(writer);
    }
    return result.get();
  }

  std::string dir_;
};

TEST_F(BlockingStepsTest, MappingAFifoIsRefusedWithoutWaitingForAWriter) {
  const std::string fifo = dir_ + "/tokens.bin";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  absl::Status status = WithoutBlocking<absl::Status>(
      fifo, [&] { return MappedFile::Open(fifo, "data file").status(); });
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("data file '" + fifo + "' is not a regular file"));
}

TEST_F(BlockingStepsTest, AFifoManifestIsSkippedWithoutBlocking) {
  const std::string step_dir = dir_ + "/job/step-00000004";
  fs::create_directories(step_dir);
  ASSERT_EQ(mkfifo((step_dir + "/MANIFEST.json").c_str(), 0600), 0);
  absl::Status status = WithoutBlocking<absl::Status>(step_dir + "/MANIFEST.json", [&] {
    return ReadCheckpointIdentity(dir_ + "/job", 4).status();
  });
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(status.message(), HasSubstr("not a regular file"));
}

TEST_F(BlockingStepsTest, ACancelledAttemptStopsScanningItsTokenFile) {
  const std::string path = dir_ + "/tokens.bin";
  std::vector<uint16_t> tokens(4096);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>(i % 50);
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(tokens.data()),
             static_cast<std::streamsize>(tokens.size() * sizeof(uint16_t)));
  DataLoaderOptions options;
  options.data.set_source("tokens");
  options.data.set_path(path);
  options.data.set_seq_len(16);
  options.data.set_token_bytes(2);
  options.vocab = 64;
  std::atomic<bool> cancelled{false};
  options.cancelled = &cancelled;
  EXPECT_TRUE(CreateDataLoader(options).ok());
  cancelled.store(true);
  absl::Status status = CreateDataLoader(options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled);
  EXPECT_THAT(status.message(), HasSubstr(path));
}

TEST_F(BlockingStepsTest, ACancelledAttemptStopsWritingItsCheckpoint) {
  RankCheckpoint state;
  state.step = 8;
  state.world_size = 1;
  state.buffers.push_back({"unit.0.param", std::vector<float>(1024, 1.0f)});
  std::atomic<bool> cancelled{true};
  absl::Status status = WriteRankCheckpoint(dir_ + "/job", state, &cancelled);
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled);
  // Nothing half-written is left under the final name.
  EXPECT_FALSE(fs::exists(dir_ + "/job/step-00000008/rank-00000.bin"));
  cancelled.store(false);
  EXPECT_TRUE(WriteRankCheckpoint(dir_ + "/job", state, &cancelled).ok());
  EXPECT_TRUE(fs::exists(dir_ + "/job/step-00000008/rank-00000.bin"));
}

TEST_F(BlockingStepsTest, TheRootProbeCreatesTheRootAndLeavesNothingBehind) {
  const std::string root = dir_ + "/checkpoints/new";
  ASSERT_TRUE(ProbeCheckpointRoot(root).ok());
  EXPECT_TRUE(fs::is_directory(root));
  EXPECT_TRUE(fs::is_empty(root));
}

TEST_F(BlockingStepsTest, TheRootProbeSaysWhyARootCannotBeWritten) {
  std::ofstream(dir_ + "/file") << "x";
  absl::Status status = ProbeCheckpointRoot(dir_ + "/file/checkpoints");
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(status.message(),
              HasSubstr("the checkpoint root '" + dir_ + "/file/checkpoints' is not writable"));
  // Where creating a file fails although the directory exists: /proc refuses new entries even to
  // root, as a read-only mount does.
  status = ProbeCheckpointRoot("/proc/self");
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(status.message(), HasSubstr("'/proc/self' is not writable"));
}

}  // namespace
}  // namespace fsdpd
