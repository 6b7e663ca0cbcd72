#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "formats/durable_file.h"
#include "nlohmann/json.hpp"
#include "tests/support/temp_dir.h"
#include "worker/checkpoint/checkpoint.h"
#include "worker/checkpoint/crc32c.h"
#include "worker/checkpoint/rank_file.h"

namespace fsdpd {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::SizeIs;

using ::fsdpd::testing::TempDir;

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string StepDir(const std::string& job_dir, int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step-%08lld", static_cast<long long>(step));
  return job_dir + "/" + name;
}

std::string RankFile(const std::string& job_dir, int64_t step, int rank) {
  char name[32];
  std::snprintf(name, sizeof(name), "/rank-%05d.bin", rank);
  return StepDir(job_dir, step) + name;
}

RankCheckpoint MakeState(int64_t step, int rank, int world_size) {
  RankCheckpoint state;
  state.step = step;
  state.rank = rank;
  state.world_size = world_size;
  state.rng_state = "rng:" + std::to_string(step * 100 + rank) + std::string("\0\xff", 2);
  state.data_position = step + 1;
  for (int unit = 0; unit < 3; ++unit) {
    ShardBuffer buffer;
    buffer.name = "unit." + std::to_string(unit) + ".param";
    for (int i = 0; i < 50 + unit; ++i) {
      buffer.values.push_back(static_cast<float>(step) + 0.001f * i - rank * 7.5f);
    }
    state.buffers.push_back(buffer);
  }
  state.buffers.push_back({"unit.0.adam_m", {}});
  return state;
}

void ExpectSameState(const RankCheckpoint& actual, const RankCheckpoint& expected) {
  EXPECT_EQ(actual.step, expected.step);
  EXPECT_EQ(actual.rank, expected.rank);
  EXPECT_EQ(actual.world_size, expected.world_size);
  EXPECT_EQ(actual.rng_state, expected.rng_state);
  EXPECT_EQ(actual.data_position, expected.data_position);
  ASSERT_EQ(actual.buffers.size(), expected.buffers.size());
  for (size_t i = 0; i < expected.buffers.size(); ++i) {
    EXPECT_EQ(actual.buffers[i].name, expected.buffers[i].name);
    EXPECT_EQ(actual.buffers[i].values, expected.buffers[i].values);
  }
}

void WriteAndCommit(const std::string& job_dir, int64_t step, int world_size, int keep) {
  for (int rank = 0; rank < world_size; ++rank) {
    const absl::Status status = WriteRankCheckpoint(job_dir, MakeState(step, rank, world_size));
    ASSERT_TRUE(status.ok()) << status;
  }
  const absl::Status status = CommitCheckpoint(job_dir, step, world_size, keep);
  ASSERT_TRUE(status.ok()) << status;
}

TEST(Crc32cTest, KnownVectorsAndIncrementalUse) {
  EXPECT_EQ(Crc32c(""), 0u);
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(Crc32c(std::string(32, '\0')), 0x8A9136AAu);  // RFC 3720 B.4
  const std::string text = "The quick brown fox jumps over the lazy dog, twice over.";
  for (size_t split = 0; split <= text.size(); ++split) {
    EXPECT_EQ(Crc32cExtend(Crc32c(text.substr(0, split)), text.data() + split, text.size() - split),
              Crc32c(text));
  }
}

TEST(CheckpointTest, RoundTripAndManifestContents) {
  TempDir directory;
  const std::string job_dir = directory.path() + "/job-1";
  WriteAndCommit(job_dir, 10, 2, 3);
  for (int rank = 0; rank < 2; ++rank) {
    auto loaded = LoadRankCheckpoint(job_dir, 10, rank, 2);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    ExpectSameState(*loaded, MakeState(10, rank, 2));
  }
  const auto manifest = nlohmann::json::parse(ReadBytes(StepDir(job_dir, 10) + "/MANIFEST.json"));
  EXPECT_EQ(manifest["step"], 10);
  EXPECT_EQ(manifest["world_size"], 2);
  EXPECT_EQ(manifest["checksum"], "crc32c");
  ASSERT_EQ(manifest["ranks"].size(), 2u);
  for (int rank = 0; rank < 2; ++rank) {
    const std::string bytes = ReadBytes(RankFile(job_dir, 10, rank));
    EXPECT_EQ(manifest["ranks"][rank]["rank"], rank);
    EXPECT_EQ(manifest["ranks"][rank]["size_bytes"], bytes.size());
    EXPECT_EQ(manifest["ranks"][rank]["crc32c"], Crc32c(bytes));
  }
  EXPECT_EQ(ReadBytes(job_dir + "/LATEST"), "10\n");
}

TEST(CheckpointTest, OnlyCommittedStepsAreListed) {
  TempDir directory;
  const std::string job_dir = directory.path();
  auto none = ListCommittedSteps(job_dir + "/does-not-exist");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  WriteAndCommit(job_dir, 5, 1, 3);
  ASSERT_TRUE(WriteRankCheckpoint(job_dir, MakeState(9, 0, 1)).ok());
  auto steps = ListCommittedSteps(job_dir);
  ASSERT_TRUE(steps.ok());
  EXPECT_THAT(*steps, ElementsAre(5));
  std::vector<std::string> skipped;
  auto latest = LoadLatestRankCheckpoint(job_dir, 0, 1, &skipped);
  ASSERT_TRUE(latest.ok());
  ASSERT_TRUE(latest->has_value());
  EXPECT_EQ((*latest)->step, 5);
  EXPECT_TRUE(skipped.empty());
}

TEST(CheckpointTest, EmptyDirectoryHasNoCheckpoint) {
  TempDir directory;
  std::vector<std::string> skipped;
  auto latest = LoadLatestRankCheckpoint(directory.path(), 0, 1, &skipped);
  ASSERT_TRUE(latest.ok());
  EXPECT_FALSE(latest->has_value());
  EXPECT_TRUE(skipped.empty());
}

TEST(CheckpointTest, RetentionKeepsNewestAndDropsStaleIncompleteSteps) {
  TempDir directory;
  const std::string job_dir = directory.path();
  WriteAndCommit(job_dir, 10, 2, 2);
  WriteAndCommit(job_dir, 20, 2, 2);
  // Step 25 was cut short by a crash; step 40 belongs to a write still in progress.
  ASSERT_TRUE(WriteRankCheckpoint(job_dir, MakeState(25, 0, 2)).ok());
  ASSERT_TRUE(WriteRankCheckpoint(job_dir, MakeState(40, 1, 2)).ok());
  // Leftovers of writers that crashed before renaming.
  WriteBytes(RankFile(job_dir, 30, 0) + ".tmp-999999", "partial");
  WriteBytes(job_dir + "/LATEST.tmp-999999", "2");
  WriteAndCommit(job_dir, 30, 2, 2);
  EXPECT_FALSE(fs::exists(RankFile(job_dir, 30, 0) + ".tmp-999999"));
  EXPECT_FALSE(fs::exists(job_dir + "/LATEST.tmp-999999"));
  auto steps = ListCommittedSteps(job_dir);
  ASSERT_TRUE(steps.ok());
  EXPECT_THAT(*steps, ElementsAre(30, 20));
  EXPECT_FALSE(fs::exists(StepDir(job_dir, 10)));
  EXPECT_FALSE(fs::exists(StepDir(job_dir, 25)));
  EXPECT_TRUE(fs::exists(RankFile(job_dir, 40, 1)));
  auto loaded = LoadRankCheckpoint(job_dir, 20, 1, 2);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ExpectSameState(*loaded, MakeState(20, 1, 2));
  EXPECT_EQ(CommitCheckpoint(job_dir, 30, 2, 0).code(), absl::StatusCode::kInvalidArgument);
}

TEST(CheckpointTest, CorruptShardIsDetectedAndLoadingFallsBack) {
  TempDir directory;
  const std::string job_dir = directory.path();
  WriteAndCommit(job_dir, 10, 2, 3);
  WriteAndCommit(job_dir, 20, 2, 3);
  const std::string path = RankFile(job_dir, 20, 1);
  std::string bytes = ReadBytes(path);
  bytes[bytes.size() / 2] ^= 0x40;
  WriteBytes(path, bytes);

  auto direct = LoadRankCheckpoint(job_dir, 20, 1, 2);
  ASSERT_FALSE(direct.ok());
  EXPECT_EQ(direct.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(direct.status().message(), HasSubstr("checkpoint step 20 rank 1: checksum mismatch"));

  std::vector<std::string> skipped;
  auto latest = LoadLatestRankCheckpoint(job_dir, 1, 2, &skipped);
  ASSERT_TRUE(latest.ok()) << latest.status();
  ASSERT_TRUE(latest->has_value());
  ExpectSameState(**latest, MakeState(10, 1, 2));
  ASSERT_THAT(skipped, SizeIs(1));
  EXPECT_THAT(skipped[0], HasSubstr("checkpoint step 20 rank 1: checksum mismatch"));

  // Rank 0's shard of step 20 is intact.
  auto rank0 = LoadLatestRankCheckpoint(job_dir, 0, 2, nullptr);
  ASSERT_TRUE(rank0.ok() && rank0->has_value());
  EXPECT_EQ((*rank0)->step, 20);
}

TEST(CheckpointTest, TruncatedAndMissingShardsAreDetected) {
  TempDir directory;
  const std::string job_dir = directory.path();
  WriteAndCommit(job_dir, 10, 2, 3);
  WriteAndCommit(job_dir, 20, 2, 3);
  WriteAndCommit(job_dir, 30, 2, 3);
  const std::string bytes = ReadBytes(RankFile(job_dir, 30, 0));
  WriteBytes(RankFile(job_dir, 30, 0), bytes.substr(0, bytes.size() - 100));
  fs::remove(RankFile(job_dir, 20, 0));

  auto truncated = LoadRankCheckpoint(job_dir, 30, 0, 2);
  ASSERT_FALSE(truncated.ok());
  EXPECT_THAT(truncated.status().message(), HasSubstr("checkpoint step 30 rank 0: size mismatch"));
  auto missing = LoadRankCheckpoint(job_dir, 20, 0, 2);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(),
              HasSubstr("checkpoint step 20 rank 0: rank-00000.bin is missing"));

  std::vector<std::string> skipped;
  auto latest = LoadLatestRankCheckpoint(job_dir, 0, 2, &skipped);
  ASSERT_TRUE(latest.ok() && latest->has_value());
  EXPECT_EQ((*latest)->step, 10);
  EXPECT_THAT(skipped, SizeIs(2));
}

TEST(CheckpointTest, CorruptManifestIsSkipped) {
  TempDir directory;
  const std::string job_dir = directory.path();
  WriteAndCommit(job_dir, 10, 1, 3);
  WriteAndCommit(job_dir, 20, 1, 3);
  WriteBytes(StepDir(job_dir, 20) + "/MANIFEST.json", "{\"format\": \"fsdpd-checkpoint\", ");
  auto direct = LoadRankCheckpoint(job_dir, 20, 0, 1);
  ASSERT_FALSE(direct.ok());
  EXPECT_THAT(direct.status().message(), HasSubstr("MANIFEST.json is malformed"));
  std::vector<std::string> skipped;
  auto latest = LoadLatestRankCheckpoint(job_dir, 0, 1, &skipped);
  ASSERT_TRUE(latest.ok() && latest->has_value());
  EXPECT_EQ((*latest)->step, 10);
  EXPECT_THAT(skipped, SizeIs(1));
}

TEST(CheckpointTest, WorldSizeAndRankMismatchesAreReported) {
  TempDir directory;
  const std::string job_dir = directory.path();
  WriteAndCommit(job_dir, 10, 2, 3);
  auto wrong_world = LoadRankCheckpoint(job_dir, 10, 0, 4);
  ASSERT_FALSE(wrong_world.ok());
  EXPECT_THAT(wrong_world.status().message(),
              HasSubstr("checkpoint step 10 rank 0: written at world size 2, this run has world "
                        "size 4"));
  std::vector<std::string> skipped;
  auto latest = LoadLatestRankCheckpoint(job_dir, 0, 4, &skipped);
  ASSERT_TRUE(latest.ok());
  EXPECT_FALSE(latest->has_value());
  EXPECT_THAT(skipped, SizeIs(1));
  // A rank file swapped for another rank's is caught even though its own checksum is fine.
  fs::copy_file(RankFile(job_dir, 10, 0), RankFile(job_dir, 10, 1),
                fs::copy_options::overwrite_existing);
  auto swapped = LoadRankCheckpoint(job_dir, 10, 1, 2);
  EXPECT_FALSE(swapped.ok());
}

TEST(CheckpointTest, CommitFailsWhenARankFileIsMissing) {
  TempDir directory;
  const std::string job_dir = directory.path();
  ASSERT_TRUE(WriteRankCheckpoint(job_dir, MakeState(10, 0, 2)).ok());
  auto status = CommitCheckpoint(job_dir, 10, 2, 3);
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("checkpoint step 10 rank 1"));
  EXPECT_FALSE(fs::exists(StepDir(job_dir, 10) + "/MANIFEST.json"));
  auto steps = ListCommittedSteps(job_dir);
  ASSERT_TRUE(steps.ok());
  EXPECT_TRUE(steps->empty());
}

TEST(CheckpointTest, FailedWritesLeaveThePreviousCheckpointIntact) {
  TempDir directory;
  const std::string job_dir = directory.path();
  WriteAndCommit(job_dir, 10, 1, 1);
  const std::string committed_bytes = ReadBytes(RankFile(job_dir, 10, 0));

  // Disk full while writing the data file: its temp file is /dev/full.
  fs::create_directories(StepDir(job_dir, 20));
  fs::create_symlink("/dev/full", DurableFileWriter::TempPathFor(RankFile(job_dir, 20, 0)));
  auto full = WriteRankCheckpoint(job_dir, MakeState(20, 0, 1));
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted) << full;
  EXPECT_THAT(full.message(), HasSubstr("checkpoint step 20 rank 0"));
  EXPECT_FALSE(fs::exists(RankFile(job_dir, 20, 0)));

  // Disk full while writing the manifest: the step stays uncommitted.
  ASSERT_TRUE(WriteRankCheckpoint(job_dir, MakeState(30, 0, 1)).ok());
  fs::create_symlink("/dev/full",
                     DurableFileWriter::TempPathFor(StepDir(job_dir, 30) + "/MANIFEST.json"));
  auto manifest_full = CommitCheckpoint(job_dir, 30, 1, 1);
  EXPECT_FALSE(manifest_full.ok());

  // An unwritable location: the job directory's parent is a regular file.
  WriteBytes(directory.path() + "/not-a-directory", "x");
  auto unwritable =
      WriteRankCheckpoint(directory.path() + "/not-a-directory/job", MakeState(40, 0, 1));
  EXPECT_FALSE(unwritable.ok());
  EXPECT_THAT(unwritable.message(), HasSubstr("cannot create checkpoint directory"));

  auto steps = ListCommittedSteps(job_dir);
  ASSERT_TRUE(steps.ok());
  EXPECT_THAT(*steps, ElementsAre(10));
  EXPECT_EQ(ReadBytes(RankFile(job_dir, 10, 0)), committed_bytes);
  std::vector<std::string> skipped;
  auto latest = LoadLatestRankCheckpoint(job_dir, 0, 1, &skipped);
  ASSERT_TRUE(latest.ok() && latest->has_value());
  ExpectSameState(**latest, MakeState(10, 0, 1));
  EXPECT_TRUE(skipped.empty());
}

TEST(CheckpointTest, RewritingACommittedStepWithdrawsItsManifestUntilRecommitted) {
  TempDir directory;
  const std::string job_dir = directory.path();
  WriteAndCommit(job_dir, 10, 2, 3);
  RankCheckpoint changed = MakeState(10, 0, 2);
  changed.data_position = 999;
  ASSERT_TRUE(WriteRankCheckpoint(job_dir, changed).ok());
  auto steps = ListCommittedSteps(job_dir);
  ASSERT_TRUE(steps.ok());
  EXPECT_TRUE(steps->empty());
  ASSERT_TRUE(WriteRankCheckpoint(job_dir, MakeState(10, 1, 2)).ok());
  ASSERT_TRUE(CommitCheckpoint(job_dir, 10, 2, 3).ok());
  auto loaded = LoadRankCheckpoint(job_dir, 10, 0, 2);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->data_position, 999);
}

TEST(RankFileTest, CorruptStructureBehindAValidChecksumNeverCrashes) {
  TempDir directory;
  const std::string job_dir = directory.path();
  ASSERT_TRUE(WriteRankCheckpoint(job_dir, MakeState(3, 0, 1)).ok());
  const std::string original = ReadBytes(RankFile(job_dir, 3, 0));
  auto parsed = ParseRankFile(original);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ExpectSameState(*parsed, MakeState(3, 0, 1));
  // Mutate the structure, then re-seal the trailer so the parser itself has to catch it.
  std::mt19937_64 random(7);
  int rejected = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string payload = original.substr(0, original.size() - 12);
    const size_t limit = std::min<size_t>(payload.size(), 200);  // header and buffer table
    payload[random() % limit] = static_cast<char>(random());
    if (random() % 4 == 0) payload.resize(random() % payload.size());
    const uint32_t crc = Crc32c(payload);
    std::string bytes = payload;
    bytes.append(reinterpret_cast<const char*>(&crc), sizeof(crc));
    bytes.append("FSDPDEND");
    auto result = ParseRankFile(bytes);
    if (!result.ok()) {
      ++rejected;
      EXPECT_EQ(result.status().code(), absl::StatusCode::kDataLoss);
    }
  }
  EXPECT_GT(rejected, 500);
  std::string bad_trailer = original;
  bad_trailer[bad_trailer.size() - 1] = 'X';
  EXPECT_THAT(ParseRankFile(bad_trailer).status().message(), HasSubstr("trailer is missing"));
}

TEST(CheckpointTest, InvalidStatesAreRejected) {
  TempDir directory;
  EXPECT_EQ(WriteRankCheckpoint(directory.path(), MakeState(1, 2, 2)).code(),
            absl::StatusCode::kInvalidArgument);
  RankCheckpoint unnamed = MakeState(1, 0, 1);
  unnamed.buffers[0].name.clear();
  EXPECT_EQ(WriteRankCheckpoint(directory.path(), unnamed).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fsdpd
