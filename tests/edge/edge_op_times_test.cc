// VulkanOptions::op_times on lavapipe with the validation layer: every command recorded is timed
// once and charged to its shader, more commands than one submit's table holds included, the GPU
// time fits inside the wall time around it, and FormatOpTimes' table says what the totals say.
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tests/edge/edge_test_support.h"

namespace fsdpd::edge {
namespace {

std::unique_ptr<VulkanBackend> TimedVulkan(bool op_times) {
  VulkanOptions options;
  options.validation = true;
  options.op_times = op_times;
  return testing::VulkanWith(options);
}

std::map<std::string, OpTime> ByOp(const std::vector<OpTime>& times) {
  std::map<std::string, OpTime> by_op;
  for (const OpTime& time : times) by_op[time.op] = time;
  return by_op;
}

TEST(EdgeOpTimesTest, EachCommandIsChargedToItsShaderOnceWithinTheWallTime) {
  std::unique_ptr<VulkanBackend> backend = TimedVulkan(true);
  ASSERT_NE(backend, nullptr);
  constexpr int64_t kRows = 64, kDim = 256;
  auto x = backend->Floats(kRows * kDim);
  auto y = backend->Floats(kRows * kDim);
  const std::vector<float> ones(kDim, 1.0f);
  auto weight = backend->Weight(ones.data(), kDim);
  ASSERT_TRUE(x.ok() && y.ok() && weight.ok());
  const std::vector<float> values = testing::RandomValues(kRows * kDim, 1.0f, 3);
  ASSERT_TRUE(backend->WriteFloats(**x, values.data(), kRows * kDim).ok());
  backend->ResetOpTimes();  // (an upload through staging would be a copy)

  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(backend->RmsNorm(**x, **weight, kRows, kDim, 1e-6, **y).ok());
  }
  ASSERT_TRUE(backend->Silu(**y, kRows * kDim, **x).ok());
  ASSERT_TRUE(backend->Add(**x, **y, kRows * kDim, **x).ok());
  ASSERT_TRUE(backend->CopyFloats(**x, 0, **y, kDim, kDim).ok());
  ASSERT_TRUE(backend->Finish().ok());
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  const std::vector<OpTime> times = backend->op_times();
  std::map<std::string, OpTime> by_op = ByOp(times);
  ASSERT_EQ(by_op.size(), 3u) << FormatOpTimes(times, wall, 1, "run");
  EXPECT_EQ(by_op["rmsnorm (fp16)"].count, 3);
  EXPECT_EQ(by_op["elementwise"].count, 2);  // SiLU and the add
  EXPECT_EQ(by_op["copy"].count, 1);
  double busy = 0.0;
  for (const OpTime& time : times) {
    EXPECT_GT(time.seconds, 0.0) << time.op;
    busy += time.seconds;
  }
  EXPECT_LE(busy, wall);  // the commands ran inside Finish
  for (size_t i = 1; i < times.size(); ++i) EXPECT_GE(times[i - 1].seconds, times[i].seconds);

  // The host's side of the same span: each of the six commands recorded once, one submit, and
  // the host's time inside the wall time.
  std::map<std::string, OpTime> host = ByOp(backend->host_times());
  EXPECT_EQ(host["recording commands"].count, 6);
  EXPECT_EQ(host["submitting and waiting"].count, 1);
  EXPECT_LE(host["recording commands"].seconds + host["submitting and waiting"].seconds, wall);
  EXPECT_LE(host["writing descriptor sets"].count, 5);  // the copy binds none
  EXPECT_GT(host["recording commands"].seconds, 0.0);

  backend->ResetOpTimes();
  EXPECT_TRUE(backend->op_times().empty());
  EXPECT_TRUE(backend->host_times().empty());
  EXPECT_EQ(backend->validation_errors(), 0) << backend->last_validation_error();
}

// 2,500 copies in one submit: more than the 2,048 timestamps a command buffer holds, so the
// backend must submit when the table fills, and no command may go untimed or be timed twice.
TEST(EdgeOpTimesTest, MoreCommandsThanOneSubmitHoldsAreEachTimedOnce) {
  std::unique_ptr<VulkanBackend> backend = TimedVulkan(true);
  ASSERT_NE(backend, nullptr);
  auto from = backend->Floats(16);
  auto to = backend->Floats(16);
  ASSERT_TRUE(from.ok() && to.ok());
  const std::vector<float> values = testing::RandomValues(16, 1.0f, 5);
  ASSERT_TRUE(backend->WriteFloats(**from, values.data(), 16).ok());
  backend->ResetOpTimes();
  constexpr int kCopies = 2500;
  for (int i = 0; i < kCopies; ++i) {
    ASSERT_TRUE(backend->CopyFloats(**from, i % 16, **to, i % 16, 1).ok());
  }
  ASSERT_TRUE(backend->Finish().ok());
  std::vector<float> copied(16);
  ASSERT_TRUE(backend->ReadFloats(**to, copied.data(), 16).ok());
  EXPECT_EQ(copied, values);
  std::map<std::string, OpTime> by_op = ByOp(backend->op_times());
  ASSERT_EQ(by_op.size(), 1u);
  EXPECT_EQ(by_op["copy"].count, kCopies);
  EXPECT_EQ(backend->validation_errors(), 0) << backend->last_validation_error();
}

TEST(EdgeOpTimesTest, OffByDefaultAndNothingIsTimed) {
  std::unique_ptr<VulkanBackend> backend = TimedVulkan(false);
  ASSERT_NE(backend, nullptr);
  auto x = backend->Floats(1024);
  ASSERT_TRUE(x.ok());
  ASSERT_TRUE(backend->Silu(**x, 1024, **x).ok());
  ASSERT_TRUE(backend->Finish().ok());
  EXPECT_TRUE(backend->op_times().empty());
  EXPECT_TRUE(backend->host_times().empty());
}

TEST(EdgeOpTimesTest, TheTableGivesEachOpPerUnitAndTheGpuShareOfTheWallTime) {
  const std::vector<OpTime> times = {{"matvec", 8, 0.006}, {"attention", 2, 0.002}};
  // Per token over 2: 4 ms of GPU time in 5 ms of wall time.
  const std::string table = FormatOpTimes(times, 0.010, 2, "token");
  EXPECT_NE(table.find("per token over 2: 4.000 ms of GPU time in 5.000 ms of wall time (80%)"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("       4.0     3.0000      75.0  matvec\n"), std::string::npos) << table;
  EXPECT_NE(table.find("       1.0     1.0000      25.0  attention\n"), std::string::npos) << table;
  EXPECT_LT(table.find("matvec"), table.find("attention"));
  EXPECT_EQ(table.find("host time"), std::string::npos) << table;

  // The host's table, as a share of the wall time: 1 ms of 5 a token.
  const std::string with_host =
      FormatOpTimes(times, 0.010, 2, "token", {{"recording commands", 270, 0.002}});
  EXPECT_NE(with_host.find("host time, per token:\n"), std::string::npos) << with_host;
  EXPECT_NE(with_host.find("     135.0     1.0000      20.0  recording commands\n"),
            std::string::npos)
      << with_host;
  EXPECT_LT(with_host.find("attention"), with_host.find("host time"));
}

}  // namespace
}  // namespace fsdpd::edge
