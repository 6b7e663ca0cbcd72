// The worker's check of a job's paths before it trains: data.path and checkpoint.init_from must
// resolve inside --allowed-root, with no `..` or symlink escape. (The trainer resolves them, and
// the checkpoint directory, through the same policy again: worker/data/path_policy.h.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "worker/session_job.h"

namespace fsdpd {
namespace {

using ::testing::HasSubstr;

class WorkerPathsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/fsdpd-worker-paths-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    base_ = pattern;
    std::filesystem::create_directories(base_ + "/root/data");
    std::filesystem::create_directories(base_ + "/outside");
    std::ofstream(base_ + "/root/data/tokens.bin") << "x";
    std::ofstream(base_ + "/outside/secret.bin") << "x";
    std::filesystem::create_symlink(base_ + "/outside", base_ + "/root/link");
    roots_ = {base_ + "/root"};
  }
  void TearDown() override { std::filesystem::remove_all(base_); }

  v1::JobSpec Spec(const std::string& data, const std::string& init) {
    v1::JobSpec spec;
    spec.mutable_data()->set_path(data);
    spec.mutable_checkpoint()->set_init_from(init);
    return spec;
  }

  std::string base_;
  std::vector<std::string> roots_;
};

TEST_F(WorkerPathsTest, PathsInsideTheRootAreAllowed) {
  EXPECT_TRUE(CheckPathsAllowed(Spec(base_ + "/root/data/tokens.bin", ""), roots_).ok());
  EXPECT_TRUE(CheckPathsAllowed(Spec("", base_ + "/root/data/tokens.bin"), roots_).ok());
}

TEST_F(WorkerPathsTest, DotDotEscapeInDataPathIsDenied) {
  absl::Status status =
      CheckPathsAllowed(Spec(base_ + "/root/data/../../outside/secret.bin", ""), roots_);
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(status.message()), HasSubstr("data.path"));
}

TEST_F(WorkerPathsTest, SymlinkEscapeInInitFromIsDenied) {
  absl::Status status = CheckPathsAllowed(Spec("", base_ + "/root/link/secret.bin"), roots_);
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(status.message()), HasSubstr("checkpoint.init_from"));
}

TEST_F(WorkerPathsTest, NoRootsAllowsAnyPath) {
  EXPECT_TRUE(CheckPathsAllowed(Spec(base_ + "/outside/secret.bin", ""), {}).ok());
}

}  // namespace
}  // namespace fsdpd
