// The CUDA engine (CudaBackend + NCCL, bf16 parameters and activations, fp32 master weights,
// gradients and AdamW) against the CPU engine and against PyTorch, on the golden tiny job of
// tests/golden/tiny; and the NCCL communicator's collectives and abort paths on one GPU.
// Skips itself without a GPU.
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "formats/safetensors.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "proto/spec/job_spec.h"
#include "tests/gpu/trainer_trajectory.h"
#include "tests/support/test_specs.h"
#include "tests/unit/engine_test_support.h"
#include "worker/backend/cuda_backend.h"
#include "worker/comm/checked_communicator.h"
#include "worker/comm/nccl_communicator.h"
#include "worker/device/cuda_runtime.h"
#include "worker/trainer.h"

namespace fsdpd {
namespace {

bool HaveGpu() { return CudaBackend::DeviceCount() > 0; }

// The golden tiny job (tests/golden/tiny/config.json) on one rank.
v1::JobSpec TinySpec(const nlohmann::json& config, const std::string& device, int64_t steps,
                     double lr) {
  return testing::GoldenTinySpec(config, device, /*world=*/1, steps, lr);
}

using testing::Train;
using testing::Trajectory;

class CudaTrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveGpu()) GTEST_SKIP() << "no CUDA device";
    // The fixtures are committed: their absence is a failure, not a reason to skip.
    ASSERT_TRUE(std::filesystem::exists(testing::GoldenTinyDir() + "/losses.safetensors"))
        << "the PyTorch fixtures are missing from " << testing::GoldenTinyDir();
    config_ = testing::GoldenTinyConfig();
  }
  nlohmann::json config_;
};

// Tolerance. Both engines use the same bf16 parameters (the CPU engine rounds its fp32 copies
// through bf16), fp32 master weights, gradients and AdamW. They differ in the activations: the
// CUDA engine stores activations and their gradients in bf16 (8 significant bits, relative
// rounding 2^-9 ≈ 0.2%) while the CPU engine keeps them in fp32. For the loss, a mean of
// log-softmax values around ln(64) ≈ 4.2 over 32 tokens, errors of that size in the head's input
// move it by about 0.2% · |logit| ≈ 0.01 nats in the worst case. Over 50 AdamW steps at lr
// 3e-3 those differences feed back through the weights, so the per-step bound grows to 0.06
// nats plus 1.5% of the loss; a wrong gather, reduce-scatter or stale buffer moves the loss by
// 0.1 or more within a few steps, and the first step (pure forward rounding) must agree to 0.02.
TEST_F(CudaTrainerTest, FollowsTheCpuEngineForFiftySteps) {
  constexpr int64_t kSteps = 50;
  const double lr = config_["trajectory_lr"];
  const Trajectory cpu = Train(TinySpec(config_, "cpu", kSteps, lr), "cpu");
  const Trajectory gpu = Train(TinySpec(config_, "cuda", kSteps, lr), "cuda:0");
  ASSERT_EQ(cpu.losses.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(gpu.losses.size(), static_cast<size_t>(kSteps));
  EXPECT_NEAR(gpu.losses[0], cpu.losses[0], 0.02) << "step 1: forward rounding only";
  double sum_of_differences = 0.0;
  for (int64_t step = 0; step < kSteps; ++step) {
    const double difference = std::abs(gpu.losses[step] - cpu.losses[step]);
    sum_of_differences += difference;
    EXPECT_LE(difference, 0.06 + 0.015 * std::abs(cpu.losses[step]))
        << "step " << step + 1 << ": cuda " << gpu.losses[step] << ", cpu " << cpu.losses[step];
  }
  EXPECT_LT(sum_of_differences / kSteps, 0.03) << "mean |cuda − cpu| over the trajectory";
  EXPECT_LT(gpu.losses.back(), gpu.losses.front() - 0.3) << "the CUDA engine learns";
  EXPECT_GT(gpu.peak_bytes, 0);
}

// The optimizer in backward and activation recompute change when work runs and what is kept,
// not the arithmetic: the same kernels on the same inputs. The trajectories must agree to
// rounding noise (exactly, where the kernels are deterministic), each keeping less memory.
TEST_F(CudaTrainerTest, OptimizerInBackwardAndRecomputeKeepTheTrajectoryWithLessMemory) {
  constexpr int64_t kSteps = 10;
  const double lr = config_["trajectory_lr"];
  v1::JobSpec spec = TinySpec(config_, "cuda", kSteps, lr);
  const Trajectory after = Train(spec, "cuda:0", /*optimizer_in_backward=*/false);
  const Trajectory during = Train(spec, "cuda:0");
  spec.mutable_parallel()->set_activation_recompute("ffn");
  const Trajectory ffn = Train(spec, "cuda:0");
  spec.mutable_parallel()->set_activation_recompute("block");
  const Trajectory block = Train(spec, "cuda:0");
  ASSERT_EQ(after.losses.size(), static_cast<size_t>(kSteps));
  for (const Trajectory* other : {&during, &ffn, &block}) {
    ASSERT_EQ(other->losses.size(), after.losses.size());
    for (int64_t step = 0; step < kSteps; ++step) {
      EXPECT_NEAR(other->losses[step], after.losses[step], 1e-5 * std::abs(after.losses[step]))
          << "step " << step + 1;
    }
  }
  EXPECT_LT(during.peak_bytes, after.peak_bytes);
  EXPECT_LT(ffn.peak_bytes, during.peak_bytes);
  EXPECT_LT(block.peak_bytes, ffn.peak_bytes);
}

// The master split in halves (the default) against the plain fp32 master cast at every gather
// (FSDPD_MASTER_LAYOUT=fp32): the same fp32 arithmetic, and bf16 parameters that differ only on
// exact ties (one value in 131,072 rounds toward zero instead of to even: about two of this
// model's 29,056 parameters over ten steps). One parameter one bf16 step apart moves this tiny
// model's loss by about 1e-4 of itself within a few steps at its lr of 3e-3 (measured on the
// H200: 1.5e-4 at step 10), so every step must agree to 2e-3 of the loss and step 1, before any
// update, to 1e-5; a stale or wrongly gathered unit moves the loss by 0.1 or more (the bound of
// FollowsTheCpuEngineForFiftySteps). With one rank the split keeps no gathered copies: less
// memory.
TEST_F(CudaTrainerTest, TheSplitMasterKeepsTheFp32MastersTrajectoryWithLessMemory) {
  constexpr int64_t kSteps = 10;
  const v1::JobSpec spec = TinySpec(config_, "cuda", kSteps, config_["trajectory_lr"]);
  const Trajectory split = Train(spec, "cuda:0");
  ASSERT_EQ(setenv("FSDPD_MASTER_LAYOUT", "fp32", 1), 0);
  const Trajectory fp32 = Train(spec, "cuda:0");
  ASSERT_EQ(unsetenv("FSDPD_MASTER_LAYOUT"), 0);
  ASSERT_EQ(split.losses.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(fp32.losses.size(), static_cast<size_t>(kSteps));
  EXPECT_NEAR(split.losses[0], fp32.losses[0], 1e-5 * std::abs(fp32.losses[0])) << "step 1";
  for (int64_t step = 0; step < kSteps; ++step) {
    EXPECT_NEAR(split.losses[step], fp32.losses[step], 2e-3 * std::abs(fp32.losses[step]))
        << "step " << step + 1;
  }
  EXPECT_LT(split.peak_bytes, fp32.peak_bytes);
}

// PyTorch's fp32 trajectory (make_fixtures.py) against the bf16 CUDA engine: the same bf16
// rounding budget as above over 20 steps, where the CPU engine in fp32 matches to 1e-5.
TEST_F(CudaTrainerTest, FollowsPyTorchsTrajectoryWithinBf16Tolerance) {
  auto losses = ReadSafetensors(testing::GoldenTinyDir() + "/losses.safetensors");
  ASSERT_TRUE(losses.ok()) << losses.status();
  std::vector<float> expected;
  for (const NamedTensor& tensor : *losses) {
    if (tensor.name == "trajectory_losses") expected = tensor.values;
  }
  ASSERT_EQ(expected.size(), config_["trajectory_steps"].get<size_t>());
  const Trajectory gpu = Train(TinySpec(config_, "cuda", static_cast<int64_t>(expected.size()),
                                        config_["trajectory_lr"].get<double>()),
                               "cuda:0");
  ASSERT_EQ(gpu.losses.size(), expected.size());
  EXPECT_NEAR(gpu.losses[0], expected[0], 0.02) << "step 1";
  double sum_of_differences = 0.0;
  for (size_t step = 0; step < expected.size(); ++step) {
    sum_of_differences += std::abs(gpu.losses[step] - expected[step]);
    EXPECT_NEAR(gpu.losses[step], expected[step], 0.06 + 0.015 * std::abs(expected[step]))
        << "step " << step + 1;
  }
  // As for the CPU engine above: a per-step bound alone would let every step sit at its edge.
  EXPECT_LT(sum_of_differences / static_cast<double>(expected.size()), 0.03)
      << "mean |cuda − PyTorch| over the trajectory";
}

// A cuda spec on a cpu rank is the rank's own check. fp32 parameters on cuda are a rule of the
// spec, refused where the spec enters: SpecValidate.CudaNeedsBf16Parameters and
// SpecRejectionTest.CudaWithFp32ParametersIsRefusedAtSubmit.
TEST_F(CudaTrainerTest, RefusesAMismatchedDevice) {
  testing::TempDir dir;
  RankContext context;
  context.checkpoint_dir = dir.path() + "/job";
  context.device = "cpu";
  auto result = RunTrainer(TinySpec(config_, "cuda", 1, 1e-3), context, {});
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.status().message().find("cannot run on worker device 'cpu'"), std::string::npos)
      << result.status();
}

class NcclCommunicatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveGpu()) GTEST_SKIP() << "no CUDA device";
    auto backend = CudaBackend::Create({});
    ASSERT_TRUE(backend.ok()) << backend.status();
    backend_ = std::move(*backend);
  }
  Tensor Upload(const std::vector<float>& values, std::unique_ptr<Buffer>* buffer) {
    auto allocated = backend_->Allocate(static_cast<int64_t>(values.size() * sizeof(float)));
    EXPECT_TRUE(allocated.ok()) << allocated.status();
    *buffer = std::move(*allocated);
    const Tensor tensor = (*buffer)->View(DType::kF32, {static_cast<int64_t>(values.size())});
    EXPECT_TRUE(backend_->CopyToDevice(values.data(), tensor, backend_->comm_stream()).ok());
    return tensor;
  }
  std::vector<float> Download(const Tensor& tensor) {
    std::vector<float> values(static_cast<size_t>(tensor.numel()));
    EXPECT_TRUE(backend_->CopyToHost(tensor, values.data(), backend_->comm_stream()).ok());
    return values;
  }
  std::unique_ptr<CudaBackend> backend_;
};

TEST_F(NcclCommunicatorTest, WorldOfOneRunsEveryCollectiveOnTheStream) {
  NcclCommunicatorOptions options;
  options.timeout = std::chrono::seconds(20);
  auto communicator = NcclCommunicator::Connect(options, nullptr);
  ASSERT_TRUE(communicator.ok()) << communicator.status();
  std::unique_ptr<Buffer> full_buffer;
  std::unique_ptr<Buffer> shard_buffer;
  // Each output starts poisoned (NaN), so a collective that did nothing fails the check.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> values{1.5f, -2.0f, 3.25f, 4.0f};
  const Tensor full = Upload(values, &full_buffer);
  const Tensor shard = Upload({nan, nan, nan, nan}, &shard_buffer);
  ASSERT_TRUE((*communicator)
                  ->ReduceScatter(full, shard, ReduceOp::kAverage, backend_->comm_stream())
                  .ok());
  EXPECT_EQ(Download(shard), values);
  // In place at world size one, an all-reduce is the identity whatever it does; it must run
  // and leave the values intact (the operation count below shows it ran).
  ASSERT_TRUE((*communicator)->AllReduce(full, ReduceOp::kMax, backend_->comm_stream()).ok());
  EXPECT_EQ(Download(full), values);
  std::unique_ptr<Buffer> gathered_buffer;
  const Tensor gathered = Upload({nan, nan, nan, nan}, &gathered_buffer);
  ASSERT_TRUE((*communicator)->AllGather(full, gathered, backend_->comm_stream()).ok());
  EXPECT_EQ(Download(gathered), values);
  EXPECT_TRUE((*communicator)->Barrier().ok());
  EXPECT_EQ((*communicator)->stats().operations, 4);

  // A shard that does not tile the full tensor is refused before NCCL sees it.
  const Tensor short_shard = shard_buffer->View(DType::kF32, {3});
  absl::Status mismatch = (*communicator)->AllGather(short_shard, full, backend_->comm_stream());
  EXPECT_EQ(mismatch.code(), absl::StatusCode::kInvalidArgument) << mismatch;

  (*communicator)->Abort();
  absl::Status after_abort =
      (*communicator)->AllReduce(full, ReduceOp::kSum, backend_->comm_stream());
  EXPECT_EQ(after_abort.code(), absl::StatusCode::kCancelled) << after_abort;
}

// The CUDA runtime's stream-priority knob refuses a mistyped value when the rank creates its
// backend, naming the accepted values, instead of running with the default.
TEST_F(NcclCommunicatorTest, TheCudaRuntimeRefusesAMistypedStreamPriority) {
  auto runtime = CreateCudaRuntime(0);
  ASSERT_TRUE(runtime.ok()) << runtime.status();
  setenv("FSDPD_STREAM_PRIORITY", "high", 1);
  absl::StatusOr<std::unique_ptr<Backend>> backend = (*runtime)->CreateBackend();
  unsetenv("FSDPD_STREAM_PRIORITY");
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(backend.status().message().find(
                "FSDPD_STREAM_PRIORITY must be one of equal, compute, comm (or unset), got 'high'"),
            std::string::npos)
      << backend.status();
  setenv("FSDPD_STREAM_PRIORITY", "compute", 1);
  absl::StatusOr<std::unique_ptr<Backend>> chosen = (*runtime)->CreateBackend();
  unsetenv("FSDPD_STREAM_PRIORITY");
  EXPECT_TRUE(chosen.ok()) << chosen.status();
}

// A one-rank job on a GPU gets local device copies instead of NCCL: the same results, in the
// order of the collective's stream.
TEST_F(NcclCommunicatorTest, TheCudaRuntimeGivesOneRankLocalCopiesInsteadOfNccl) {
  auto runtime = CreateCudaRuntime(0);
  ASSERT_TRUE(runtime.ok()) << runtime.status();
  CommunicatorOptions options;
  auto communicator = (*runtime)->CreateCommunicator(options, nullptr);
  ASSERT_TRUE(communicator.ok()) << communicator.status();
  auto* checked = dynamic_cast<CheckedCommunicator*>(communicator->get());
  ASSERT_NE(checked, nullptr);
  EXPECT_EQ(dynamic_cast<NcclCommunicator*>(&checked->inner()), nullptr);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // Large enough that a copy not ordered before the download would be caught mid-way.
  std::vector<float> values(1 << 22);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 1009) - 500.0f;
  std::unique_ptr<Buffer> full_buffer, shard_buffer, gathered_buffer;
  const Tensor full = Upload(values, &full_buffer);
  const Tensor shard = Upload(std::vector<float>(values.size(), nan), &shard_buffer);
  ASSERT_TRUE((*communicator)
                  ->ReduceScatter(full, shard, ReduceOp::kAverage, backend_->comm_stream())
                  .ok());
  EXPECT_EQ(Download(shard), values);
  ASSERT_TRUE((*communicator)->AllReduce(full, ReduceOp::kSum, backend_->comm_stream()).ok());
  const Tensor gathered = Upload(std::vector<float>(values.size(), nan), &gathered_buffer);
  ASSERT_TRUE((*communicator)->AllGather(full, gathered, backend_->comm_stream()).ok());
  EXPECT_EQ(Download(gathered), values);
  EXPECT_TRUE((*communicator)->Barrier().ok());
}

// Rank 1 never arrives: rank 0 must give up within the timeout, not hang in NCCL's init.
TEST_F(NcclCommunicatorTest, MissingPeerFailsWithinTheTimeout) {
  testing::TempDir store_dir;
  auto store = FileKeyValueStore::Open(store_dir.path());
  ASSERT_TRUE(store.ok()) << store.status();
  NcclCommunicatorOptions options;
  options.rank = 0;
  options.world_size = 2;
  options.timeout = std::chrono::seconds(3);
  const auto start = std::chrono::steady_clock::now();
  auto communicator = NcclCommunicator::Connect(options, store->get());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(communicator.ok());
  EXPECT_LT(seconds, 30.0) << communicator.status();
  EXPECT_NE(communicator.status().message().find("rank 0"), std::string::npos)
      << communicator.status();
  // The published id is the hex form of NCCL's 128-byte unique id.
  auto published = (*store)->Get(kNcclUniqueIdKey, std::chrono::seconds(1));
  ASSERT_TRUE(published.ok()) << published.status();
  EXPECT_EQ(published->size(), 2 * sizeof(ncclUniqueId::internal));

  // Rank 1 of a world whose rank 0 never published: a clear error after the timeout.
  testing::TempDir empty_dir;
  auto empty_store = FileKeyValueStore::Open(empty_dir.path());
  ASSERT_TRUE(empty_store.ok());
  options.rank = 1;
  options.timeout = std::chrono::milliseconds(500);
  auto waiting = NcclCommunicator::Connect(options, empty_store->get());
  ASSERT_FALSE(waiting.ok());
  EXPECT_NE(waiting.status().message().find("NCCL unique id"), std::string::npos)
      << waiting.status();
}

}  // namespace
}  // namespace fsdpd
