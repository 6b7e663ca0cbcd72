#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
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

}  // namespace
}  // namespace fsdpd
