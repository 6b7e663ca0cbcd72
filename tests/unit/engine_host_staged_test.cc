// The host-staged communicator (worker/comm/host_staged_communicator.h) that CUDA ranks sharing a
// GPU use: every collective's result must equal Gloo's own on the same inputs, reach the
// "device" tensor through the copier (outputs start poisoned), and every rank must agree on
// whether devices are shared.
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/engine_test_support.h"
#include "worker/comm/file_key_value_store.h"
#include "worker/comm/gloo_communicator.h"
#include "worker/comm/host_staged_communicator.h"

namespace fsdpd {
namespace {

using ::testing::HasSubstr;

class InlineStream : public Stream {
 public:
  absl::Status Synchronize() override { return absl::OkStatus(); }
};

// "Device" memory is ordinary memory here; the copier counts what it moves.
class CountingCopier : public DeviceCopier {
 public:
  explicit CountingCopier(std::atomic<int64_t>* bytes) : bytes_(bytes) {}
  absl::Status ToHost(const Tensor& device, void* host, Stream&) override {
    std::memcpy(host, device.data, device.bytes());
    *bytes_ += device.bytes();
    return absl::OkStatus();
  }
  absl::Status ToDevice(const void* host, const Tensor& device, Stream&) override {
    std::memcpy(device.data, host, device.bytes());
    *bytes_ += device.bytes();
    return absl::OkStatus();
  }

 private:
  std::atomic<int64_t>* bytes_;
};

void RunStagedRanks(int world, const std::function<void(Communicator&)>& body,
                    std::atomic<int64_t>* copied) {
  testing::TempDir store_dir;
  auto store = FileKeyValueStore::Open(store_dir.path());
  ASSERT_TRUE(store.ok()) << store.status();
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      CommunicatorOptions options;
      options.rank = rank;
      options.world_size = world;
      options.timeout = std::chrono::seconds(20);
      auto staged = HostStagedCommunicator::Connect(options, store->get(),
                                                    std::make_unique<CountingCopier>(copied));
      ASSERT_TRUE(staged.ok()) << staged.status();
      body(**staged);
    });
  }
  for (std::thread& thread : threads) thread.join();
}

float Value(int rank, int64_t index) { return static_cast<float>(rank * 100 + index % 97) / 8; }

class HostStagedTest : public ::testing::TestWithParam<int> {};

TEST_P(HostStagedTest, CollectivesMatchGlooAndLandInDeviceMemory) {
  const int world = GetParam();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  constexpr int64_t kShard = 1031;
  std::atomic<int64_t> copied{0};
  RunStagedRanks(
      world,
      [&](Communicator& communicator) {
        InlineStream stream;
        const int rank = communicator.rank();
        // All-gather: each rank's shard, in rank order.
        std::vector<float> shard(kShard), full(kShard * world, nan);
        for (int64_t i = 0; i < kShard; ++i) shard[i] = Value(rank, i);
        ASSERT_TRUE(communicator
                        .AllGather(Tensor{shard.data(), DType::kF32, {kShard}},
                                   Tensor{full.data(), DType::kF32, {kShard * world}}, stream)
                        .ok());
        for (int r = 0; r < world; ++r) {
          for (int64_t i = 0; i < kShard; ++i) ASSERT_EQ(full[r * kShard + i], Value(r, i));
        }
        // Reduce-scatter with averaging: this rank's slice of the mean over ranks.
        std::vector<float> mine(kShard, nan);
        ASSERT_TRUE(communicator
                        .ReduceScatter(Tensor{full.data(), DType::kF32, {kShard * world}},
                                       Tensor{mine.data(), DType::kF32, {kShard}},
                                       ReduceOp::kAverage, stream)
                        .ok());
        for (int64_t i = 0; i < kShard; ++i) {
          ASSERT_FLOAT_EQ(mine[i], full[rank * kShard + i]) << i;  // every rank sent `full`
        }
        // All-reduce, in place.
        std::vector<float> values{static_cast<float>(rank + 1), -static_cast<float>(rank)};
        ASSERT_TRUE(
            communicator.AllReduce(Tensor{values.data(), DType::kF32, {2}}, ReduceOp::kSum, stream)
                .ok());
        EXPECT_EQ(values[0], world * (world + 1) / 2.0f);
        EXPECT_EQ(values[1], -(world * (world - 1)) / 2.0f);
        EXPECT_GT(communicator.stats().operations, 0);
      },
      &copied);
  // Each rank moved every collective's input and output through the copier.
  const int64_t per_rank = (kShard + kShard * world) * 4 + (kShard * world + kShard) * 4 + 2 * 8;
  EXPECT_EQ(copied.load(), per_rank * world);
}

INSTANTIATE_TEST_SUITE_P(Worlds, HostStagedTest, ::testing::Values(2, 3));

std::vector<bool> ShareAnswers(const std::vector<std::string>& ids) {
  testing::TempDir store_dir;
  auto store = FileKeyValueStore::Open(store_dir.path());
  EXPECT_TRUE(store.ok()) << store.status();
  std::vector<bool> answers(ids.size());
  std::vector<std::thread> threads;
  for (size_t rank = 0; rank < ids.size(); ++rank) {
    threads.emplace_back([&, rank] {
      auto shared = RanksShareADevice(**store, static_cast<int>(rank), static_cast<int>(ids.size()),
                                      ids[rank], std::chrono::seconds(10));
      ASSERT_TRUE(shared.ok()) << shared.status();
      answers[rank] = *shared;
    });
  }
  for (std::thread& thread : threads) thread.join();
  return answers;
}

TEST(RanksShareADeviceTest, EveryRankReachesTheSameAnswer) {
  // Two ranks on GPU-a: all three stage through the host, GPU-b's rank included, so that no
  // rank waits in NCCL for peers that chose Gloo.
  EXPECT_EQ(ShareAnswers({"GPU-a", "GPU-a", "GPU-b"}), (std::vector<bool>{true, true, true}));
  EXPECT_EQ(ShareAnswers({"GPU-a", "GPU-b", "GPU-c"}), (std::vector<bool>{false, false, false}));
}

TEST(RanksShareADeviceTest, AMissingRankIsNamedAfterTheTimeout) {
  testing::TempDir store_dir;
  auto store = FileKeyValueStore::Open(store_dir.path());
  ASSERT_TRUE(store.ok()) << store.status();
  auto shared = RanksShareADevice(**store, 0, 2, "GPU-a", std::chrono::milliseconds(200));
  ASSERT_FALSE(shared.ok());
  EXPECT_THAT(std::string(shared.status().message()), HasSubstr("waiting for rank 1"));
}

}  // namespace
}  // namespace fsdpd
