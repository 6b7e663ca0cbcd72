// CheckedCommunicator, the one check of the collective contract (worker/comm/communicator.h) in
// front of every communicator: each factory hands one out, each refused call is INVALID_ARGUMENT
// with a message naming the collective, the argument and its shape, and a refused call reaches
// neither the communicator behind it nor the output.
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/unit/engine_test_support.h"
#include "worker/comm/checked_communicator.h"
#include "worker/comm/local_communicator.h"
#include "worker/device/device_runtime.h"

namespace fsdpd {
namespace {

class InlineStream : public Stream {
 public:
  absl::Status Synchronize() override { return absl::OkStatus(); }
};

Tensor F32(std::vector<float>& values, int64_t offset, int64_t numel) {
  return Tensor{values.data() + offset, DType::kF32, {numel}};
}
Tensor F32(std::vector<float>& values) {
  return F32(values, 0, static_cast<int64_t>(values.size()));
}

// Counts what reaches it; any rank and world size, so the world-size rules can be checked
// without peers.
class RecordingCommunicator : public Communicator {
 public:
  RecordingCommunicator(int rank, int world_size, int* calls)
      : rank_(rank), world_size_(world_size), calls_(calls) {}
  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  absl::Status AllGather(const Tensor&, const Tensor&, Stream&) override { return Call(); }
  absl::Status ReduceScatter(const Tensor&, const Tensor&, ReduceOp, Stream&) override {
    return Call();
  }
  absl::Status AllReduce(const Tensor&, ReduceOp, Stream&) override { return Call(); }
  absl::Status Barrier() override { return Call(); }
  void Abort() override { ++*calls_; }
  CommunicatorStats stats() const override { return CommunicatorStats{0.5, 0.0, 7, 64}; }

 private:
  absl::Status Call() {
    ++*calls_;
    return absl::OkStatus();
  }
  int rank_;
  int world_size_;
  int* calls_;
};

// A device-style local communicator (world size 1) whose copies are counted, so a refused call
// is seen to queue nothing.
class CheckedCommunicatorTest : public ::testing::Test {
 protected:
  CheckedCommunicatorTest()
      : local_(LocalCommunicator::Create(
            [this](const Tensor& src, const Tensor& dst, Stream&) -> absl::Status {
              ++copies_;
              std::memcpy(dst.data, src.data, static_cast<size_t>(dst.bytes()));
              return absl::OkStatus();
            })) {}

  // The message of a refused call, which must be INVALID_ARGUMENT and copy nothing.
  std::string Refused(const absl::Status& status) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_EQ(copies_, 0) << "a refused call reached the communicator";
    return std::string(status.message());
  }

  // rank `rank` of `world_size` over a RecordingCommunicator.
  CheckedCommunicator Recording(int rank, int world_size) {
    return CheckedCommunicator(std::make_unique<RecordingCommunicator>(rank, world_size, &calls_));
  }

  InlineStream stream_;
  int copies_ = 0;
  int calls_ = 0;
  std::unique_ptr<Communicator> local_;
};

TEST_F(CheckedCommunicatorTest, EveryFactoryHandsOutACheckedCommunicator) {
  EXPECT_NE(dynamic_cast<CheckedCommunicator*>(local_.get()), nullptr);
  EXPECT_NE(dynamic_cast<CheckedCommunicator*>(LocalCommunicator::Create().get()), nullptr);
  CommunicatorOptions one;
  absl::StatusOr<std::unique_ptr<Communicator>> created = CreateCommunicator(one, nullptr);
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_NE(dynamic_cast<CheckedCommunicator*>(created->get()), nullptr);
  absl::StatusOr<std::unique_ptr<DeviceRuntime>> cpu = CreateDeviceRuntime("cpu");
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  absl::StatusOr<std::unique_ptr<Communicator>> from_runtime =
      (*cpu)->CreateCommunicator(one, nullptr);
  ASSERT_TRUE(from_runtime.ok()) << from_runtime.status();
  EXPECT_NE(dynamic_cast<CheckedCommunicator*>(from_runtime->get()), nullptr);
  // Gloo, for a world of two.
  testing::RunRanks(2, [](Communicator& communicator) {
    EXPECT_NE(dynamic_cast<CheckedCommunicator*>(&communicator), nullptr);
  });
}

TEST_F(CheckedCommunicatorTest, AllGatherRefusals) {
  std::vector<float> shard = {1, 2, 3}, full(3, -1.0f), longer(7, -1.0f);
  std::vector<uint16_t> halves(3);
  const Tensor bf16_full{halves.data(), DType::kBF16, {3}};
  EXPECT_EQ(Refused(local_->AllGather(F32(shard), bf16_full, stream_)),
            "AllGather: shard f32[3] and full bf16[3] must have the same dtype");
  EXPECT_EQ(Refused(local_->AllGather(F32(shard), F32(longer), stream_)),
            "AllGather: full f32[7] must hold world size 1 × shard f32[3] = 3 elements");
  EXPECT_EQ(Refused(local_->AllGather(Tensor{shard.data(), DType::kF32, {-3}}, F32(full), stream_)),
            "AllGather: shard has a negative dimension: f32[-3]");
  EXPECT_EQ(Refused(local_->AllGather(Tensor{nullptr, DType::kF32, {3}}, F32(full), stream_)),
            "AllGather: shard has no data (f32[3] (null))");
  EXPECT_EQ(Refused(local_->AllGather(F32(shard), Tensor{nullptr, DType::kF32, {3}}, stream_)),
            "AllGather: full has no data (f32[3] (null))");
  EXPECT_EQ(full, std::vector<float>(3, -1.0f));
  // The shard partly over full: neither in place nor apart.
  std::vector<float> both(4, 0.0f);
  EXPECT_EQ(Refused(local_->AllGather(F32(both, 1, 3), F32(both, 0, 3), stream_)),
            "AllGather: shard f32[3] overlaps full f32[3] but is not rank 0's slice of it; it "
            "must be exactly that slice (in place) or not share memory with full");
}

TEST_F(CheckedCommunicatorTest, AllGatherInPlaceIsOnlyThisRanksOwnSlice) {
  std::vector<float> full(6, 0.0f);
  CheckedCommunicator rank1 = Recording(1, 2);
  EXPECT_TRUE(rank1.AllGather(F32(full, 3, 3), F32(full), stream_).ok());
  EXPECT_EQ(calls_, 1);
  // Rank 0's slice is not rank 1's.
  const absl::Status other = rank1.AllGather(F32(full, 0, 3), F32(full), stream_);
  EXPECT_EQ(other.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(other.message(),
            "AllGather: shard f32[3] overlaps full f32[6] but is not rank 1's slice of it; it "
            "must be exactly that slice (in place) or not share memory with full");
  EXPECT_EQ(calls_, 1);
  // One world-size rule for every communicator: shard × 2 ranks = full.
  std::vector<float> shard(3), odd(7);
  const absl::Status uneven = rank1.AllGather(F32(shard), F32(odd), stream_);
  EXPECT_EQ(uneven.message(),
            "AllGather: full f32[7] must hold world size 2 × shard f32[3] = 6 elements");
  EXPECT_EQ(calls_, 1);
  // On one rank a gather in place is the whole buffer, and nothing is copied.
  ASSERT_TRUE(local_->AllGather(F32(full), F32(full), stream_).ok());
  EXPECT_EQ(copies_, 0);
}

TEST_F(CheckedCommunicatorTest, ReduceScatterRefusals) {
  std::vector<float> full = {1, 2, 3, 4}, shard(4, -1.0f), short_shard(3, -1.0f);
  std::vector<uint16_t> halves(4), shard_halves(4);
  const Tensor bf16_full{halves.data(), DType::kBF16, {4}};
  const Tensor bf16_shard{shard_halves.data(), DType::kBF16, {4}};
  // bf16 is refused on every communicator, NCCL's included: gradients reduce in fp32.
  EXPECT_EQ(Refused(local_->ReduceScatter(bf16_full, bf16_shard, ReduceOp::kAverage, stream_)),
            "ReduceScatter: full must be f32 (gradients are reduced in fp32, "
            "parallel.reduce_dtype), got bf16[4]");
  EXPECT_EQ(Refused(local_->ReduceScatter(F32(full), bf16_shard, ReduceOp::kSum, stream_)),
            "ReduceScatter: shard must be f32 (gradients are reduced in fp32, "
            "parallel.reduce_dtype), got bf16[4]");
  EXPECT_EQ(Refused(local_->ReduceScatter(F32(full), F32(shard), ReduceOp::kMax, stream_)),
            "ReduceScatter: reduces by sum or average only, not max");
  EXPECT_EQ(Refused(local_->ReduceScatter(F32(full), F32(shard), ReduceOp::kMin, stream_)),
            "ReduceScatter: reduces by sum or average only, not min");
  EXPECT_EQ(Refused(local_->ReduceScatter(F32(full), F32(short_shard), ReduceOp::kSum, stream_)),
            "ReduceScatter: full f32[4] must hold world size 1 × shard f32[3] = 3 elements");
  EXPECT_EQ(Refused(local_->ReduceScatter(Tensor{nullptr, DType::kF32, {4}}, F32(shard),
                                          ReduceOp::kSum, stream_)),
            "ReduceScatter: full has no data (f32[4] (null))");
  // full is left unchanged, so the shard may not be any part of it, not even all of it.
  EXPECT_EQ(Refused(local_->ReduceScatter(F32(full), F32(full), ReduceOp::kSum, stream_)),
            "ReduceScatter: shard f32[4] overlaps full f32[4]; full is left unchanged, so the "
            "shard must not share memory with it");
  EXPECT_EQ(shard, std::vector<float>(4, -1.0f));
  CheckedCommunicator rank0 = Recording(0, 2);
  std::vector<float> wide(8), own(4);
  EXPECT_EQ(rank0.ReduceScatter(F32(wide), F32(wide, 0, 4), ReduceOp::kSum, stream_).message(),
            "ReduceScatter: shard f32[4] overlaps full f32[8]; full is left unchanged, so the "
            "shard must not share memory with it");
  EXPECT_EQ(rank0.ReduceScatter(F32(full), F32(own), ReduceOp::kSum, stream_).message(),
            "ReduceScatter: full f32[4] must hold world size 2 × shard f32[4] = 8 elements");
  EXPECT_EQ(calls_, 0);
  EXPECT_TRUE(rank0.ReduceScatter(F32(wide), F32(own), ReduceOp::kAverage, stream_).ok());
  EXPECT_EQ(calls_, 1);
}

TEST_F(CheckedCommunicatorTest, AllReduceRefusals) {
  std::vector<uint16_t> halves(2);
  EXPECT_EQ(
      Refused(local_->AllReduce(Tensor{halves.data(), DType::kBF16, {2}}, ReduceOp::kSum, stream_)),
      "AllReduce: values must be f32 or i32, got bf16[2]");
  std::vector<int32_t> flags = {1, 0};
  const Tensor ints{flags.data(), DType::kI32, {2}};
  EXPECT_EQ(Refused(local_->AllReduce(ints, ReduceOp::kAverage, stream_)),
            "AllReduce: an average needs f32 values, got i32[2] (sum them and divide instead)");
  EXPECT_EQ(Refused(local_->AllReduce(Tensor{flags.data(), DType::kI32, {2, -1}}, ReduceOp::kMin,
                                      stream_)),
            "AllReduce: values has a negative dimension: i32[2, -1]");
  // What the contract allows passes.
  EXPECT_TRUE(local_->AllReduce(ints, ReduceOp::kMin, stream_).ok());
  std::vector<float> loss = {2.5f};
  EXPECT_TRUE(local_->AllReduce(F32(loss), ReduceOp::kAverage, stream_).ok());
}

TEST_F(CheckedCommunicatorTest, EmptyTensorsMayHaveNoDataAndEverythingElseIsForwarded) {
  CheckedCommunicator rank1 = Recording(1, 3);
  const Tensor empty{nullptr, DType::kF32, {0}};
  EXPECT_TRUE(rank1.AllGather(empty, empty, stream_).ok());
  EXPECT_TRUE(rank1.ReduceScatter(empty, empty, ReduceOp::kSum, stream_).ok());
  EXPECT_TRUE(rank1.AllReduce(empty, ReduceOp::kSum, stream_).ok());
  EXPECT_EQ(calls_, 3);
  EXPECT_EQ(rank1.rank(), 1);
  EXPECT_EQ(rank1.world_size(), 3);
  EXPECT_TRUE(rank1.Barrier().ok());
  rank1.Abort();
  EXPECT_EQ(calls_, 5);
  EXPECT_EQ(rank1.stats().operations, 7);
  EXPECT_EQ(rank1.stats().bytes_sent, 64);
}

}  // namespace
}  // namespace fsdpd
