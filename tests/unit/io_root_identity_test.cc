// A checkpoint root's identity and the error of ranks that do not share one
// (worker/checkpoint/root_probe.h): workers on one root read one identity, workers on two roots
// two; a marker that is not an identity is named; rank 0 that cannot find another rank's file
// fails the commit with FAILED_PRECONDITION naming the file and the remedy.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <set>
#include <string>
#include <vector>

#include "tests/support/temp_dir.h"
#include "worker/checkpoint/checkpoint.h"
#include "worker/checkpoint/root_probe.h"

namespace fsdpd {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;

TEST(RootIdentityTest, OneRootHasOneIdentityAndTwoRootsHaveTwo) {
  testing::TempDir dir("root-id");
  const absl::StatusOr<std::string> first = ReadOrCreateRootIdentity(dir.path() + "/shared");
  ASSERT_FALSE(first.ok()) << "a root that does not exist yet has no identity";
  ASSERT_TRUE(ProbeCheckpointRoot(dir.path() + "/shared").ok());
  ASSERT_TRUE(ProbeCheckpointRoot(dir.path() + "/other").ok());
  const absl::StatusOr<std::string> a = ReadOrCreateRootIdentity(dir.path() + "/shared");
  const absl::StatusOr<std::string> again = ReadOrCreateRootIdentity(dir.path() + "/shared");
  const absl::StatusOr<std::string> b = ReadOrCreateRootIdentity(dir.path() + "/other");
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_THAT(*a, MatchesRegex("[0-9a-f]{32}"));
  EXPECT_EQ(*a, *again);
  EXPECT_NE(*a, *b);
  // Only the marker is left behind, no temporary file.
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir.path() + "/shared")) {
    names.push_back(entry.path().filename().string());
  }
  EXPECT_EQ(names, std::vector<std::string>{kRootIdentityFile});
}

TEST(RootIdentityTest, WorkersStartingTogetherOnOneRootAgree) {
  testing::TempDir dir("root-id");
  const std::string root = dir.path() + "/shared";
  ASSERT_TRUE(ProbeCheckpointRoot(root).ok());
  std::vector<std::future<absl::StatusOr<std::string>>> readers;
  for (int i = 0; i < 16; ++i) {
    readers.push_back(
        std::async(std::launch::async, [&] { return ReadOrCreateRootIdentity(root); }));
  }
  std::set<std::string> identities;
  for (auto& reader : readers) {
    absl::StatusOr<std::string> identity = reader.get();
    ASSERT_TRUE(identity.ok()) << identity.status();
    identities.insert(*identity);
  }
  EXPECT_EQ(identities.size(), 1u);
}

TEST(RootIdentityTest, AMarkerThatIsNoIdentityIsNamed) {
  testing::TempDir dir("root-id");
  std::ofstream(dir.path() + "/" + kRootIdentityFile) << "not an identity\n";
  const absl::StatusOr<std::string> identity = ReadOrCreateRootIdentity(dir.path());
  EXPECT_EQ(identity.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(identity.status().message(),
              HasSubstr(dir.path() + "/" + kRootIdentityFile + " does not hold"));
}

TEST(RootIdentityTest, ACommitThatMissesARanksFileNamesItAndTheRemedy) {
  // Rank 1 wrote its file under its own root; rank 0 commits under another.
  testing::TempDir dir("root-id");
  const std::string root_0 = dir.path() + "/host-0/job";
  const std::string root_1 = dir.path() + "/host-1/job";
  for (int rank = 0; rank < 2; ++rank) {
    RankCheckpoint state;
    state.step = 4;
    state.rank = rank;
    state.world_size = 2;
    state.buffers.push_back({"unit.0.param", {1.0f, 2.0f}});
    ASSERT_TRUE(WriteRankCheckpoint(rank == 0 ? root_0 : root_1, state).ok());
  }
  EXPECT_EQ(FirstMissingRankFile(root_0, 4, 2), 1);
  EXPECT_EQ(FirstMissingRankFile(root_1, 4, 2), 0);
  const absl::Status committed = CommitCheckpoint(root_0, 4, 2, 1);
  EXPECT_EQ(committed.code(), absl::StatusCode::kFailedPrecondition) << committed;
  EXPECT_THAT(committed.message(),
              HasSubstr("checkpoint step 4 rank 1: missing " + RankCheckpointPath(root_0, 4, 1)));
  EXPECT_THAT(committed.message(),
              HasSubstr("do not share one checkpoint root: give every worker that may run it the "
                        "same --checkpoint-root"));
  EXPECT_THAT(committed.message(), HasSubstr("No retry can fix this"));
  EXPECT_FALSE(fs::exists(root_0 + "/step-00000004/MANIFEST.json"));
}

}  // namespace
}  // namespace fsdpd
