// The sharded tokens source (worker/data/sharded_data_loader.h, token_shards.h, sample_order.h):
// shard order, every window once an epoch in a seeded order, a resumed loader continuing at the
// exact row, the global batch kept across world sizes, manifests, confinement of every shard,
// and clear errors for shards that are truncated, vanish or hold bad ids.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "tests/support/temp_dir.h"
#include "worker/data/data_loader.h"
#include "worker/data/path_policy.h"
#include "worker/data/sample_order.h"

namespace fsdpd {
namespace {

using ::testing::HasSubstr;

void WriteTokens(const std::string& path, const std::vector<uint32_t>& tokens) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(tokens.data()),
            static_cast<std::streamsize>(tokens.size() * sizeof(uint32_t)));
}

// Shard i holds `sizes[i]` tokens numbered on from `first` (uint32, so every token of the
// dataset is its own id and a window's first input names where it came from).
std::vector<std::string> WriteShards(const std::string& folder, const std::vector<uint32_t>& sizes,
                                     uint32_t first = 0) {
  std::vector<std::string> paths;
  uint32_t next = first;
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::vector<uint32_t> tokens(sizes[i]);
    for (uint32_t& token : tokens) token = next++;
    paths.push_back(folder + "/part-" + std::to_string(i) + ".bin");
    WriteTokens(paths.back(), tokens);
  }
  return paths;
}

DataLoaderOptions Options(const std::string& path, int64_t batch, int rank = 0, int world = 1,
                          uint64_t seed = 7) {
  DataLoaderOptions options;
  options.data.set_source("tokens");
  options.data.set_path(path);
  options.data.set_seq_len(4);
  options.data.set_token_bytes(4);
  options.vocab = 1 << 20;
  options.batch_size = batch;
  options.rank = rank;
  options.world_size = world;
  options.seed = seed;
  return options;
}

// The first input token of each row of batch `step`.
std::vector<int32_t> RowStarts(DataLoader& loader, int64_t step, int64_t batch) {
  std::vector<int32_t> inputs(static_cast<size_t>(batch * 4));
  std::vector<int32_t> targets(inputs.size());
  const absl::Status status = loader.Batch(step, inputs.data(), targets.data());
  EXPECT_TRUE(status.ok()) << status;
  std::vector<int32_t> starts;
  for (int64_t row = 0; row < batch; ++row) {
    for (int64_t k = 0; k < 4; ++k) {
      EXPECT_EQ(targets[row * 4 + k], inputs[row * 4 + k] + 1) << "targets are inputs shifted";
    }
    starts.push_back(inputs[row * 4]);
  }
  return starts;
}

TEST(SampleOrder, EachEpochIsAPermutationAndSeedsAndEpochsDiffer) {
  for (uint64_t size : {1u, 2u, 3u, 5u, 17u, 64u, 1000u}) {
    std::set<uint64_t> seen;
    for (uint64_t i = 0; i < size; ++i) seen.insert(PermuteIndex(3, 0, i, size));
    EXPECT_EQ(seen.size(), size) << size;
    EXPECT_LT(*seen.rbegin(), size) << size;
  }
  std::vector<uint64_t> a, b, c;
  for (uint64_t i = 0; i < 1000; ++i) {
    a.push_back(PermuteIndex(3, 0, i, 1000));
    b.push_back(PermuteIndex(4, 0, i, 1000));
    c.push_back(PermuteIndex(3, 1, i, 1000));
  }
  EXPECT_NE(a, b) << "another seed, another order";
  EXPECT_NE(a, c) << "another epoch, another order";
  EXPECT_EQ(SampleWindow(3, 1000 + 5, 1000), c[5]);
}

// Windows never cross a shard's end: shard sizes 13, 9 and 3 tokens give 3, 2 and 0 windows.
TEST(ShardedData, AFolderIsReadInNameOrderAndEveryWindowOnceAnEpoch) {
  testing::TempDir dir;
  WriteShards(dir.path(), {13, 9, 3});
  auto loader = CreateDataLoader(Options(dir.path(), 5));
  ASSERT_TRUE(loader.ok()) << loader.status();
  EXPECT_EQ((*loader)->num_tokens(), 25);
  const std::set<int32_t> windows = {0, 4, 8, 13, 17};  // shard 0 at 0, shard 1 at 13
  // The dataset's windows are numbered shard by shard in name order; row r reads window
  // SampleWindow(seed, r, 5).
  const std::vector<int32_t> numbered(windows.begin(), windows.end());
  for (int64_t step = 0; step < 3; ++step) {
    const std::vector<int32_t> starts = RowStarts(**loader, step, 5);
    for (int64_t row = 0; row < 5; ++row) {
      EXPECT_EQ(starts[row], numbered[SampleWindow(7, step * 5 + row, 5)]) << step << " " << row;
    }
  }
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    const std::vector<int32_t> starts = RowStarts(**loader, epoch, 5);
    EXPECT_EQ(std::set<int32_t>(starts.begin(), starts.end()), windows) << "epoch " << epoch;
  }
  std::vector<int32_t> orders[2] = {RowStarts(**loader, 0, 5), RowStarts(**loader, 1, 5)};
  std::vector<int32_t> other_seed =
      RowStarts(**CreateDataLoader(Options(dir.path(), 5, 0, 1, 8)), 0, 5);
  EXPECT_TRUE(orders[0] != orders[1] || orders[0] != other_seed)
      << "the order must depend on the seed and the epoch";
}

// A resumed job opens the shards anew and reads from its checkpoint's step on: the very rows the
// uninterrupted job read there, mid-epoch included. And the global batch is the same at world
// sizes 1 and 2.
TEST(ShardedData, AFreshLoaderContinuesAtTheExactRowAndRanksSplitTheGlobalBatch) {
  testing::TempDir dir;
  WriteShards(dir.path(), {41, 30, 17});  // 10 + 7 + 4 = 21 windows: 3 rows a step, mid-epoch
  auto first = CreateDataLoader(Options(dir.path(), 3));
  ASSERT_TRUE(first.ok()) << first.status();
  std::vector<std::vector<int32_t>> stream;
  for (int64_t step = 0; step < 20; ++step) stream.push_back(RowStarts(**first, step, 3));
  auto resumed = CreateDataLoader(Options(dir.path(), 3));
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  for (int64_t step = 9; step < 20; ++step) {
    EXPECT_EQ(RowStarts(**resumed, step, 3), stream[step]) << "step " << step;
  }
  auto whole = CreateDataLoader(Options(dir.path(), 4));
  auto rank0 = CreateDataLoader(Options(dir.path(), 2, 0, 2));
  auto rank1 = CreateDataLoader(Options(dir.path(), 2, 1, 2));
  ASSERT_TRUE(whole.ok() && rank0.ok() && rank1.ok());
  for (int64_t step = 0; step < 8; ++step) {
    std::vector<int32_t> split = RowStarts(**rank0, step, 2);
    const std::vector<int32_t> second = RowStarts(**rank1, step, 2);
    split.insert(split.end(), second.begin(), second.end());
    EXPECT_EQ(split, RowStarts(**whole, step, 4)) << "step " << step;
  }
}

TEST(ShardedData, AManifestListsShardsRelativeToItsFolderWithOptionalCounts) {
  testing::TempDir dir;
  std::filesystem::create_directories(dir.File("shards"));
  const std::vector<std::string> shards = WriteShards(dir.File("shards"), {9, 13});
  std::ofstream(dir.File("train.manifest"))
      << "# two shards, the second first\n\nshards/part-1.bin\t13\r\n"
      << shards[0] << "\n";
  auto loader = CreateDataLoader(Options(dir.File("train.manifest"), 5));
  ASSERT_TRUE(loader.ok()) << loader.status();
  // In the manifest's order: part-1 (tokens 9..21) is windows 0-2, part-0 windows 3-4.
  const std::vector<int32_t> numbered = {9, 13, 17, 0, 4};
  const std::vector<int32_t> starts = RowStarts(**loader, 0, 5);
  for (int64_t row = 0; row < 5; ++row) {
    EXPECT_EQ(starts[row], numbered[SampleWindow(7, row, 5)]) << row;
  }

  std::ofstream(dir.File("short.manifest")) << "shards/part-1.bin\t14\n";
  auto counted = CreateDataLoader(Options(dir.File("short.manifest"), 1));
  ASSERT_FALSE(counted.ok());
  EXPECT_THAT(counted.status().message(),
              HasSubstr("part-1.bin' (line 1 of manifest '" + dir.File("short.manifest") +
                        "') holds 13 tokens where the manifest lists 14: truncated"));
  std::ofstream(dir.File("missing.manifest")) << "# nothing yet\nshards/part-9.bin\n";
  auto missing = CreateDataLoader(Options(dir.File("missing.manifest"), 1));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound) << missing.status();
  EXPECT_THAT(missing.status().message(), HasSubstr("part-9.bin"));
  EXPECT_THAT(missing.status().message(), HasSubstr("line 2 of manifest"));
  std::ofstream(dir.File("empty.manifest")) << "# no shard\n";
  EXPECT_THAT(CreateDataLoader(Options(dir.File("empty.manifest"), 1)).status().message(),
              HasSubstr("lists no shard"));
}

TEST(ShardedData, EveryShardIsConfinedToTheAllowedRoots) {
  testing::TempDir root;
  testing::TempDir outside;
  const std::vector<std::string> far = WriteShards(outside.path(), {9});
  std::filesystem::create_directories(root.File("data"));
  WriteShards(root.File("data"), {9});
  std::filesystem::create_symlink(far[0], root.File("data/part-9.bin"));
  DataLoaderOptions options = Options(root.File("data"), 1);
  options.allowed_roots = {root.path()};
  auto folder = CreateDataLoader(options);
  ASSERT_FALSE(folder.ok());
  EXPECT_EQ(folder.status().code(), absl::StatusCode::kPermissionDenied) << folder.status();
  EXPECT_THAT(folder.status().message(), HasSubstr("part-9.bin"));
  EXPECT_THAT(folder.status().message(), HasSubstr("outside the allowed roots"));

  std::ofstream(root.File("escape.manifest"))
      << "data/part-0.bin\n../" + std::filesystem::path(outside.path()).filename().string() +
             "/part-0.bin\n";
  options.data.set_path(root.File("escape.manifest"));
  auto manifest = CreateDataLoader(options);
  ASSERT_FALSE(manifest.ok());
  EXPECT_EQ(manifest.status().code(), absl::StatusCode::kPermissionDenied) << manifest.status();
  EXPECT_THAT(manifest.status().message(), HasSubstr("line 2 of manifest"));

  // The folder itself passes the spec's path policy, which refuses a folder for any other field.
  v1::JobSpec spec;
  spec.mutable_data()->set_path(root.File("data"));
  EXPECT_TRUE(ResolveSpecPaths(spec, {root.path()}).ok());
  spec.mutable_checkpoint()->set_init_from(root.File("data"));
  EXPECT_THAT(ResolveSpecPaths(spec, {root.path()}).status().message(),
              HasSubstr("checkpoint.init_from"));
}

TEST(ShardedData, TruncatedVanishedAndBadShardsAreNamed) {
  testing::TempDir dir;
  const std::vector<std::string> shards = WriteShards(dir.path(), {21, 21});
  // A partial token at the end.
  std::filesystem::resize_file(shards[1], 21 * 4 - 1);
  auto partial = CreateDataLoader(Options(dir.path(), 2));
  ASSERT_FALSE(partial.ok());
  EXPECT_THAT(partial.status().message(),
              HasSubstr("data shard '" + shards[1] + "' (in folder '" + dir.path() +
                        "') is 83 bytes, not a multiple of data.token_bytes = 4"));
  std::filesystem::resize_file(shards[1], 21 * 4);

  auto loader = CreateDataLoader(Options(dir.path(), 10));
  ASSERT_TRUE(loader.ok()) << loader.status();
  std::vector<int32_t> inputs(40), targets(40);
  ASSERT_TRUE((*loader)->Batch(0, inputs.data(), targets.data()).ok());
  // Truncated under the job, to whole tokens: its windows are no longer the ones counted.
  std::filesystem::resize_file(shards[1], 13 * 4);
  absl::Status truncated = (*loader)->Batch(1, inputs.data(), targets.data());
  EXPECT_EQ(truncated.code(), absl::StatusCode::kFailedPrecondition) << truncated;
  EXPECT_THAT(truncated.message(), HasSubstr("data shard '" + shards[1] + "'"));
  EXPECT_THAT(truncated.message(), HasSubstr("is 52 bytes now where it was 84"));
  EXPECT_THAT(truncated.message(), HasSubstr("truncated"));
  std::filesystem::resize_file(shards[1], 21 * 4);
  std::filesystem::remove(shards[0]);
  absl::Status vanished = (*loader)->Batch(2, inputs.data(), targets.data());
  EXPECT_EQ(vanished.code(), absl::StatusCode::kNotFound) << vanished;
  EXPECT_THAT(vanished.message(), HasSubstr("data shard '" + shards[0] + "'"));
  EXPECT_THAT(vanished.message(), HasSubstr("vanished after the job opened it"));

  WriteTokens(shards[0], {1, 2, 3, 1 << 20, 5});
  auto bad = CreateDataLoader(Options(dir.path(), 1));
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(),
              HasSubstr("data shard '" + shards[0] + "' (in folder '" + dir.path() +
                        "'): token 3 (byte offset 12) has id 1048576, which is not below"));
  std::filesystem::remove(shards[0]);
  std::filesystem::remove(shards[1]);
  EXPECT_THAT(CreateDataLoader(Options(dir.path(), 1)).status().message(),
              HasSubstr("holds no .bin shard"));
  WriteTokens(dir.File("tiny.bin"), {1, 2, 3});
  EXPECT_THAT(CreateDataLoader(Options(dir.path(), 1)).status().message(),
              HasSubstr("holds a window of data.seq_len + 1 = 5 tokens"));
  DataLoaderOptions text = Options(dir.path(), 1);
  text.data.set_source("text");
  text.vocab = 256;
  EXPECT_THAT(CreateDataLoader(text).status().message(), HasSubstr("needs data.source 'tokens'"));
}

}  // namespace
}  // namespace fsdpd
