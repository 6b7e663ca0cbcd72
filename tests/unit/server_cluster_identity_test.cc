// Issue 11 §2: a state folder's cluster id decides whether an empty store is new or lost.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "server/cluster_identity.h"

namespace fsdpd::server {
namespace {

using ::testing::HasSubstr;

class ClusterIdentityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/fsdpd-cluster-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
    database_ = dir_ + "/fsdpd.db";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
  std::string database_;
};

TEST_F(ClusterIdentityTest, ANewFolderGetsAnIdThatStaysAndDiffersFromOtherFolders) {
  absl::StatusOr<std::string> id = OpenClusterIdentity(dir_, database_);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(id->size(), 36u);
  std::ofstream(database_) << "SQLite format 3";  // the store, created after the id
  absl::StatusOr<std::string> again = OpenClusterIdentity(dir_, database_);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, *id);
  EXPECT_NE(NewUuid(), NewUuid());
}

TEST_F(ClusterIdentityTest, AnEmptyOrMissingStoreOfAKnownClusterIsRefusedByName) {
  ASSERT_TRUE(OpenClusterIdentity(dir_, database_).ok());
  std::ofstream(database_).close();  // truncated to zero length
  absl::StatusOr<std::string> id = OpenClusterIdentity(dir_, database_);
  EXPECT_EQ(id.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(id.status().message()), HasSubstr(database_ + " is empty"));
  std::filesystem::remove(database_);
  id = OpenClusterIdentity(dir_, database_);
  EXPECT_EQ(id.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(id.status().message()), HasSubstr(database_ + " is missing"));
}

TEST_F(ClusterIdentityTest, AZeroLengthStoreWithoutAnIdIsRefusedAndAnOldStoreGetsAnId) {
  std::ofstream(database_).close();
  absl::StatusOr<std::string> id = OpenClusterIdentity(dir_, database_);
  EXPECT_EQ(id.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(id.status().message()), HasSubstr("zero length"));
  std::ofstream(database_) << "SQLite format 3";  // a store from before cluster ids
  id = OpenClusterIdentity(dir_, database_);
  ASSERT_TRUE(id.ok()) << id.status();
}

}  // namespace
}  // namespace fsdpd::server
