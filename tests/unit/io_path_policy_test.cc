#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "worker/data/path_policy.h"

namespace fsdpd {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class PathPolicyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "io_path_XXXXXX";
    base_ = fs::canonical(mkdtemp(pattern.data())).string();
    root_ = base_ + "/data";
    fs::create_directories(root_ + "/sub");
    fs::create_directories(base_ + "/data2");
    fs::create_directories(base_ + "/secret");
    std::ofstream(root_ + "/sub/train.bin") << "x";
    std::ofstream(base_ + "/secret/key") << "x";
  }
  void TearDown() override { fs::remove_all(base_); }

  std::string base_;
  std::string root_;
};

TEST_F(PathPolicyTest, PathsInsideARootResolveCanonically) {
  auto resolved = ResolveConfinedPath(root_ + "/sub/./../sub/train.bin", {root_});
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_EQ(*resolved, root_ + "/sub/train.bin");
  // Not yet existing paths (a new checkpoint directory) are allowed inside a root.
  auto fresh = ResolveConfinedPath(root_ + "/checkpoints/job-1", {base_ + "/elsewhere", root_});
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_EQ(*fresh, root_ + "/checkpoints/job-1");
  auto root_itself = ResolveConfinedPath(root_ + "/", {root_});
  ASSERT_TRUE(root_itself.ok());
}

TEST_F(PathPolicyTest, DotDotEscapeIsDenied) {
  auto escaped = ResolveConfinedPath(root_ + "/sub/../../secret/key", {root_});
  ASSERT_FALSE(escaped.ok());
  EXPECT_EQ(escaped.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(escaped.status().message(), HasSubstr(base_ + "/secret/key"));
  EXPECT_THAT(escaped.status().message(), HasSubstr("outside the allowed roots: " + root_));
  auto through_missing = ResolveConfinedPath(root_ + "/missing/../../secret/new", {root_});
  EXPECT_EQ(through_missing.status().code(), absl::StatusCode::kPermissionDenied);
}

TEST_F(PathPolicyTest, SymlinkEscapeIsDenied) {
  fs::create_symlink(base_ + "/secret", root_ + "/link");
  auto escaped = ResolveConfinedPath(root_ + "/link/key", {root_});
  ASSERT_FALSE(escaped.ok());
  EXPECT_EQ(escaped.status().code(), absl::StatusCode::kPermissionDenied);
  // A symlink that stays inside the root is fine.
  fs::create_symlink(root_ + "/sub", root_ + "/inner");
  auto inside = ResolveConfinedPath(root_ + "/inner/train.bin", {root_});
  ASSERT_TRUE(inside.ok()) << inside.status();
  EXPECT_EQ(*inside, root_ + "/sub/train.bin");
}

TEST_F(PathPolicyTest, SiblingWithACommonPrefixIsOutside) {
  auto sibling = ResolveConfinedPath(base_ + "/data2/file", {root_});
  EXPECT_EQ(sibling.status().code(), absl::StatusCode::kPermissionDenied);
}

TEST_F(PathPolicyTest, RelativePathsResolveAgainstTheWorkingDirectory) {
  const fs::path previous = fs::current_path();
  fs::current_path(root_);
  auto inside = ResolveConfinedPath("sub/train.bin", {root_});
  auto outside = ResolveConfinedPath("../secret/key", {root_});
  fs::current_path(previous);
  ASSERT_TRUE(inside.ok()) << inside.status();
  EXPECT_EQ(*inside, root_ + "/sub/train.bin");
  EXPECT_EQ(outside.status().code(), absl::StatusCode::kPermissionDenied);
}

TEST_F(PathPolicyTest, NoRootsAllowsEverythingAndEmptyPathIsAnError) {
  auto anywhere = ResolveConfinedPath(root_ + "/../secret/key", {});
  ASSERT_TRUE(anywhere.ok());
  EXPECT_EQ(*anywhere, base_ + "/secret/key");
  auto empty = ResolveConfinedPath("", {root_});
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
}

// Opening a FIFO for reading blocks until a writer comes: anything but a regular file is refused
// by stat(2), before anything opens it.
TEST_F(PathPolicyTest, OnlyRegularFilesPassTheRegularFileCheck) {
  EXPECT_TRUE(CheckRegularFile(root_ + "/sub/train.bin").ok());
  // Missing: the reader says NOT_FOUND with its role.
  EXPECT_TRUE(CheckRegularFile(root_ + "/sub/missing.bin").ok());
  ASSERT_EQ(mkfifo((root_ + "/fifo").c_str(), 0600), 0);
  absl::Status fifo = CheckRegularFile(root_ + "/fifo");
  EXPECT_EQ(fifo.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(fifo.message(), HasSubstr("path '" + root_ + "/fifo' is not a regular file"));
  EXPECT_THAT(fifo.message(), HasSubstr("a FIFO"));
  absl::Status directory = CheckRegularFile(root_ + "/sub");
  EXPECT_EQ(directory.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(directory.message(), HasSubstr("a directory"));
  absl::Status device = CheckRegularFile("/dev/null");
  EXPECT_EQ(device.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(device.message(), HasSubstr("a character device"));
  const std::string socket_path = root_ + "/socket";
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::snprintf(address.sun_path, sizeof(address.sun_path), "%s", socket_path.c_str());
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  EXPECT_THAT(CheckRegularFile(socket_path).message(), HasSubstr("a socket"));
  close(fd);
}

TEST_F(PathPolicyTest, ASymlinkToAFifoIsRefusedNamingBoth) {
  ASSERT_EQ(mkfifo((root_ + "/fifo").c_str(), 0600), 0);
  fs::create_symlink(root_ + "/fifo", root_ + "/corpus.txt");
  absl::Status status = CheckRegularFile(root_ + "/corpus.txt");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("path '" + root_ + "/corpus.txt' resolves to '" + root_ +
                                          "/fifo', which is not a regular file"));
  // A symlink to a regular file is fine.
  fs::create_symlink(root_ + "/sub/train.bin", root_ + "/train-link.bin");
  EXPECT_TRUE(CheckRegularFile(root_ + "/train-link.bin").ok());
}

TEST_F(PathPolicyTest, SpecPathsThatAreNotRegularFilesAreRefusedByField) {
  ASSERT_EQ(mkfifo((root_ + "/fifo").c_str(), 0600), 0);
  v1::JobSpec spec;
  spec.mutable_data()->set_path(root_ + "/fifo");
  absl::Status data = ResolveSpecPaths(spec, {root_}).status();
  EXPECT_EQ(data.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(data.message(), HasSubstr("data.path: path '" + root_ + "/fifo'"));
  spec.mutable_data()->clear_path();
  spec.mutable_checkpoint()->set_init_from(root_ + "/fifo");
  absl::Status init = ResolveSpecPaths(spec, {root_}).status();
  EXPECT_EQ(init.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(init.message(), HasSubstr("checkpoint.init_from: path '" + root_ + "/fifo'"));
  spec.mutable_checkpoint()->set_init_from(root_ + "/sub/train.bin");
  EXPECT_TRUE(ResolveSpecPaths(spec, {root_}).ok());
}

// A checkpoint folder that cannot be made is the worker's storage at fault, worth a retry
// elsewhere: UNAVAILABLE, not a permanent error.
TEST_F(PathPolicyTest, AnUncreatableCheckpointDirectoryIsTheWorkersFault) {
  std::ofstream(root_ + "/file") << "x";
  auto created = CreateConfinedDirectory(root_ + "/file/job", {root_});
  EXPECT_EQ(created.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(created.status().message(), HasSubstr(root_ + "/file/job"));
}

}  // namespace
}  // namespace fsdpd
