// The worker's one path policy for a job (worker/data/path_policy.h): data.path and
// checkpoint.init_from must resolve inside --allowed-root, with no `..` or symlink escape, and
// the checkpoint directory is created only there.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "proto/spec/spec_path_fields.h"
#include "worker/data/path_policy.h"

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
  EXPECT_TRUE(ResolveSpecPaths(Spec(base_ + "/root/data/tokens.bin", ""), roots_).ok());
  EXPECT_TRUE(ResolveSpecPaths(Spec("", base_ + "/root/data/tokens.bin"), roots_).ok());
}

TEST_F(WorkerPathsTest, DotDotEscapeInDataPathIsDenied) {
  absl::Status status =
      ResolveSpecPaths(Spec(base_ + "/root/data/../../outside/secret.bin", ""), roots_).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(status.message()), HasSubstr("data.path"));
}

TEST_F(WorkerPathsTest, SymlinkEscapeInInitFromIsDenied) {
  absl::Status status =
      ResolveSpecPaths(Spec("", base_ + "/root/link/secret.bin"), roots_).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(status.message()), HasSubstr("checkpoint.init_from"));
}

TEST_F(WorkerPathsTest, ResolvedPathsAreCanonical) {
  absl::StatusOr<v1::JobSpec> paths =
      ResolveSpecPaths(Spec(base_ + "/root/data/./tokens.bin", ""), roots_);
  ASSERT_TRUE(paths.ok()) << paths.status();
  EXPECT_EQ(paths->data().path(),
            std::filesystem::canonical(base_ + "/root/data/tokens.bin").string());
  EXPECT_TRUE(paths->checkpoint().init_from().empty());
}

// Every path field of the spec (proto/spec/spec_path_fields.h) goes through the policy: each one,
// set alone to a path through the symlink, is denied and named.
TEST_F(WorkerPathsTest, EveryPathFieldIsConfined) {
  ASSERT_FALSE(SpecPathFields().empty());
  for (const SpecPathField& field : SpecPathFields()) {
    v1::JobSpec spec;
    field.Set(&spec, base_ + "/root/link/secret.bin");
    absl::Status status = ResolveSpecPaths(spec, roots_).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied) << field.name();
    EXPECT_THAT(std::string(status.message()), HasSubstr(field.name() + ": path"));
    field.Set(&spec, base_ + "/root/data/./tokens.bin");
    absl::StatusOr<v1::JobSpec> resolved = ResolveSpecPaths(spec, roots_);
    ASSERT_TRUE(resolved.ok()) << resolved.status();
    EXPECT_EQ(field.Get(*resolved),
              std::filesystem::canonical(base_ + "/root/data/tokens.bin").string())
        << field.name();
  }
}

TEST_F(WorkerPathsTest, CheckpointDirectoryIsCreatedOnlyInsideTheRoots) {
  absl::StatusOr<std::string> inside = CreateConfinedDirectory(base_ + "/root/ckpt/job", roots_);
  ASSERT_TRUE(inside.ok()) << inside.status();
  EXPECT_TRUE(std::filesystem::is_directory(base_ + "/root/ckpt/job"));
  absl::StatusOr<std::string> outside = CreateConfinedDirectory(base_ + "/root/link/job", roots_);
  EXPECT_EQ(outside.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_FALSE(std::filesystem::exists(base_ + "/outside/job"));
}

TEST_F(WorkerPathsTest, NoRootsAllowsAnyPath) {
  EXPECT_TRUE(ResolveSpecPaths(Spec(base_ + "/outside/secret.bin", ""), {}).ok());
}

}  // namespace
}  // namespace fsdpd
