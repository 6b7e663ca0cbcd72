#include <chrono>
#include <cstring>
#include <future>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tests/unit/engine_test_support.h"
#include "worker/comm/communicator.h"
#include "worker/comm/local_communicator.h"

namespace fsdpd {
namespace {

using testing::RunRanks;

class InlineStream : public Stream {
 public:
  absl::Status Synchronize() override { return absl::OkStatus(); }
};

Tensor Floats(std::vector<float>& values) {
  return Tensor{values.data(), DType::kF32, {static_cast<int64_t>(values.size())}};
}

float Value(int rank, int64_t index) { return static_cast<float>(rank * 1000 + index % 997); }

class CommunicatorWorldTest : public ::testing::TestWithParam<int> {};

TEST_P(CommunicatorWorldTest, AllGatherConcatenatesShardsInRankOrder) {
  const int world = GetParam();
  for (int64_t shard_numel : {1, 5, 1031}) {
    RunRanks(world, [&](Communicator& communicator) {
      InlineStream stream;
      const int rank = communicator.rank();
      std::vector<float> shard(shard_numel);
      for (int64_t i = 0; i < shard_numel; ++i) shard[i] = Value(rank, i);
      std::vector<float> full(shard_numel * world, -1.0f);
      ASSERT_TRUE(communicator.AllGather(Floats(shard), Floats(full), stream).ok());
      for (int r = 0; r < world; ++r) {
        for (int64_t i = 0; i < shard_numel; ++i) {
          ASSERT_EQ(full[r * shard_numel + i], Value(r, i)) << "rank " << r << " index " << i;
        }
      }
      // In place: the shard is this rank's slice of the output.
      std::vector<float> in_place(shard_numel * world, -1.0f);
      std::copy(shard.begin(), shard.end(), in_place.begin() + rank * shard_numel);
      Tensor own{in_place.data() + rank * shard_numel, DType::kF32, {shard_numel}};
      ASSERT_TRUE(communicator.AllGather(own, Floats(in_place), stream).ok());
      EXPECT_EQ(in_place, full);
    });
  }
}

TEST_P(CommunicatorWorldTest, ReduceScatterSumsAndAveragesEachRanksSlice) {
  const int world = GetParam();
  for (int64_t shard_numel : {1, 3, 4097, 300001}) {
    RunRanks(world, [&](Communicator& communicator) {
      InlineStream stream;
      const int rank = communicator.rank();
      std::vector<float> full(shard_numel * world);
      for (int64_t i = 0; i < static_cast<int64_t>(full.size()); ++i) full[i] = Value(rank, i);
      const std::vector<float> original = full;
      std::vector<float> shard(shard_numel, -1.0f);
      ASSERT_TRUE(
          communicator.ReduceScatter(Floats(full), Floats(shard), ReduceOp::kSum, stream).ok());
      EXPECT_EQ(full, original) << "the input must be left unchanged";
      for (int64_t i = 0; i < shard_numel; ++i) {
        float expected = 0.0f;
        for (int r = 0; r < world; ++r) expected += Value(r, rank * shard_numel + i);
        ASSERT_FLOAT_EQ(shard[i], expected) << "index " << i;
      }
      ASSERT_TRUE(
          communicator.ReduceScatter(Floats(full), Floats(shard), ReduceOp::kAverage, stream).ok());
      for (int64_t i = 0; i < shard_numel; i += 97) {
        float expected = 0.0f;
        for (int r = 0; r < world; ++r) expected += Value(r, rank * shard_numel + i);
        ASSERT_FLOAT_EQ(shard[i], expected / world) << "index " << i;
      }
    });
  }
}

TEST_P(CommunicatorWorldTest, AllReduceSumMaxMinAverageAndBarrier) {
  const int world = GetParam();
  RunRanks(world, [&](Communicator& communicator) {
    InlineStream stream;
    const int rank = communicator.rank();
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kAverage}) {
      std::vector<float> values = {static_cast<float>(rank + 1), static_cast<float>(-rank), 2.5f};
      ASSERT_TRUE(communicator.AllReduce(Floats(values), op, stream).ok());
      const float sum = world * (world + 1) / 2.0f;
      const float negative_sum = -(world - 1) * world / 2.0f;
      switch (op) {
        case ReduceOp::kSum:
          EXPECT_EQ(values, (std::vector<float>{sum, negative_sum, 2.5f * world}));
          break;
        case ReduceOp::kMax:
          EXPECT_EQ(values, (std::vector<float>{static_cast<float>(world), 0.0f, 2.5f}));
          break;
        case ReduceOp::kMin:
          EXPECT_EQ(values, (std::vector<float>{1.0f, static_cast<float>(1 - world), 2.5f}));
          break;
        case ReduceOp::kAverage:
          EXPECT_FLOAT_EQ(values[0], sum / world);
          EXPECT_FLOAT_EQ(values[2], 2.5f);
          break;
      }
    }
    std::vector<int32_t> flags = {rank == world - 1 ? 0 : 1, rank};
    Tensor ints{flags.data(), DType::kI32, {2}};
    ASSERT_TRUE(communicator.AllReduce(ints, ReduceOp::kMin, stream).ok());
    EXPECT_EQ(flags, (std::vector<int32_t>{0, 0}));
    EXPECT_TRUE(communicator.Barrier().ok());
  });
}

INSTANTIATE_TEST_SUITE_P(Worlds, CommunicatorWorldTest, ::testing::Values(1, 2, 3, 4));

TEST(CommunicatorTest, RejectsMismatchedShapes) {
  RunRanks(2, [&](Communicator& communicator) {
    InlineStream stream;
    std::vector<float> shard(3), full(7);
    const absl::Status gather = communicator.AllGather(Floats(shard), Floats(full), stream);
    EXPECT_EQ(gather.code(), absl::StatusCode::kInvalidArgument);
    const absl::Status scatter =
        communicator.ReduceScatter(Floats(full), Floats(shard), ReduceOp::kSum, stream);
    EXPECT_EQ(scatter.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(scatter.message().find("ReduceScatter"), std::string::npos);
  });
}

TEST(CommunicatorTest, APeerThatNeverJoinsFailsTheCollectiveWithinTheTimeout) {
  const auto timeout = std::chrono::milliseconds(1000);
  RunRanks(
      2,
      [&](Communicator& communicator) {
        if (communicator.rank() == 1) return;  // never joins, then disconnects
        InlineStream stream;
        std::vector<float> values(16, 1.0f);
        const auto start = std::chrono::steady_clock::now();
        const absl::Status status = communicator.AllReduce(Floats(values), ReduceOp::kSum, stream);
        const auto waited = std::chrono::steady_clock::now() - start;
        EXPECT_FALSE(status.ok());
        EXPECT_NE(status.message().find("AllReduce"), std::string::npos) << status;
        EXPECT_LT(waited, timeout + std::chrono::seconds(5));
      },
      timeout);
}

TEST(CommunicatorTest, AStuckPeerFailsTheCollectiveWithinTheTimeout) {
  const auto timeout = std::chrono::milliseconds(800);
  std::promise<void> collective_returned;
  std::shared_future<void> returned = collective_returned.get_future().share();
  RunRanks(
      2,
      [&](Communicator& communicator) {
        if (communicator.rank() == 1) {
          // Alive and connected, but never takes part: it stays until rank 0's collective has
          // returned (or far past the timeout, should it never return).
          EXPECT_EQ(returned.wait_for(timeout * 20), std::future_status::ready);
          return;
        }
        InlineStream stream;
        std::vector<float> shard(8, 1.0f), full(16);
        const auto start = std::chrono::steady_clock::now();
        const absl::Status status = communicator.AllGather(Floats(shard), Floats(full), stream);
        const auto waited = std::chrono::steady_clock::now() - start;
        collective_returned.set_value();
        EXPECT_FALSE(status.ok());
        EXPECT_GE(waited, timeout * 9 / 10);
        EXPECT_LT(waited, timeout * 5 / 2);
      },
      timeout);
}

TEST(CommunicatorTest, AbortFailsLaterOperationsAsCancelled) {
  RunRanks(2, [&](Communicator& communicator) {
    InlineStream stream;
    communicator.Abort();
    std::vector<float> values(4, 1.0f);
    EXPECT_EQ(communicator.AllReduce(Floats(values), ReduceOp::kSum, stream).code(),
              absl::StatusCode::kCancelled);
    EXPECT_EQ(communicator.Barrier().code(), absl::StatusCode::kCancelled);
  });
}

// A stream that counts host synchronisations: a device's one-rank collectives must not make any.
class CountingStream : public Stream {
 public:
  absl::Status Synchronize() override {
    ++synchronizations;
    return absl::OkStatus();
  }
  int synchronizations = 0;
};

TEST(CommunicatorTest, OneRankOnADeviceQueuesCopiesOnTheStreamAndNeverSynchronises) {
  std::vector<std::pair<const void*, void*>> copies;
  std::unique_ptr<Communicator> local =
      LocalCommunicator::Create([&](const Tensor& src, const Tensor& dst, Stream&) -> absl::Status {
        copies.emplace_back(src.data, dst.data);
        std::memcpy(dst.data, src.data, static_cast<size_t>(dst.bytes()));
        return absl::OkStatus();
      });
  Communicator& communicator = *local;
  CountingStream stream;
  std::vector<float> shard = {1.0f, 2.0f, 3.0f}, full(3, -1.0f);
  ASSERT_TRUE(communicator.AllGather(Floats(shard), Floats(full), stream).ok());
  EXPECT_EQ(full, shard);
  std::vector<float> reduced(3, -1.0f);
  ASSERT_TRUE(
      communicator.ReduceScatter(Floats(full), Floats(reduced), ReduceOp::kAverage, stream).ok());
  EXPECT_EQ(reduced, shard);  // the average over one rank is the value itself
  // In place (a gather whose shard is the full buffer's own slice): nothing to copy.
  ASSERT_TRUE(communicator.AllGather(Floats(full), Floats(full), stream).ok());
  std::vector<float> sums = {4.0f, 5.0f};
  ASSERT_TRUE(communicator.AllReduce(Floats(sums), ReduceOp::kSum, stream).ok());
  EXPECT_EQ(sums, (std::vector<float>{4.0f, 5.0f}));
  ASSERT_EQ(copies.size(), 2u);
  EXPECT_EQ(copies[0], (std::pair<const void*, void*>{shard.data(), full.data()}));
  EXPECT_EQ(copies[1], (std::pair<const void*, void*>{full.data(), reduced.data()}));
  EXPECT_EQ(stream.synchronizations, 0);
  // Mismatched sizes are refused before anything is queued.
  std::vector<float> short_full(2);
  EXPECT_EQ(communicator.AllGather(Floats(shard), Floats(short_full), stream).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(copies.size(), 2u);
}

TEST(CommunicatorTest, ConnectFailsWithoutPeersWithinTheTimeout) {
  testing::TempDir dir;
  auto store = FileKeyValueStore::Open(dir.path());
  ASSERT_TRUE(store.ok());
  CommunicatorOptions options;
  options.rank = 0;
  options.world_size = 2;
  options.timeout = std::chrono::milliseconds(300);
  const auto start = std::chrono::steady_clock::now();
  auto communicator = CreateCommunicator(options, store->get());
  EXPECT_FALSE(communicator.ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_FALSE(CreateCommunicator(options, nullptr).ok());
}

}  // namespace
}  // namespace fsdpd
