#include "gtest/gtest.h"
#include "worker/fsdp/flat_shard_layout.h"

namespace fsdpd {
namespace {

TEST(FlatShardLayoutTest, ShardsTileThePaddedBufferAndCoverEveryParameterOnce) {
  for (int64_t numel : {0, 1, 7, 8, 9, 1000, 1001}) {
    for (int world : {1, 2, 3, 4, 7}) {
      int64_t covered = 0;
      int64_t next_offset = 0;
      for (int rank = 0; rank < world; ++rank) {
        const FlatShardLayout layout = ComputeFlatShardLayout(numel, world, rank);
        EXPECT_EQ(layout.padded_numel % world, 0);
        EXPECT_GE(layout.padded_numel, numel);
        EXPECT_LT(layout.padded_numel - numel, world);
        EXPECT_EQ(layout.shard_numel * world, layout.padded_numel);
        EXPECT_EQ(layout.shard_offset, next_offset) << "numel " << numel << " world " << world;
        EXPECT_GE(layout.valid_shard_numel, 0);
        EXPECT_LE(layout.valid_shard_numel, layout.shard_numel);
        next_offset += layout.shard_numel;
        covered += layout.valid_shard_numel;
      }
      EXPECT_EQ(covered, numel) << "numel " << numel << " world " << world;
    }
  }
}

TEST(FlatShardLayoutTest, PaddingSitsAtTheEndOfTheLastShards) {
  // 10 over 4 ranks: shards of 3, the last rank owns 1 parameter and 2 padding slots.
  const FlatShardLayout last = ComputeFlatShardLayout(10, 4, 3);
  EXPECT_EQ(last.padded_numel, 12);
  EXPECT_EQ(last.shard_numel, 3);
  EXPECT_EQ(last.shard_offset, 9);
  EXPECT_EQ(last.valid_shard_numel, 1);
  // 2 over 4 ranks: ranks 2 and 3 own only padding.
  EXPECT_EQ(ComputeFlatShardLayout(2, 4, 1).valid_shard_numel, 1);
  EXPECT_EQ(ComputeFlatShardLayout(2, 4, 2).valid_shard_numel, 0);
}

}  // namespace
}  // namespace fsdpd
