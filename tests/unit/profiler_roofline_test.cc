// The seed's roofline verdicts at their thresholds, the analytic estimate's ratios, and the
// measured memory roof as an upper bound.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/elementwise.h"
#include "worker/profiler/roofline.h"

namespace fsdpd {
namespace {

TEST(ProfilerRooflineTest, MemoryBoundNeedsLowSmAndHighDram) {
  EXPECT_EQ(ClassifyThroughput(0.10, 0.90), Verdict::kMemoryBound);
  EXPECT_EQ(ClassifyThroughput(0.2499, 0.7501), Verdict::kMemoryBound);
  // The seed's bounds are strict: exactly 25 % SM or exactly 75 % DRAM is not memory-bound.
  EXPECT_EQ(ClassifyThroughput(0.25, 0.90), Verdict::kLatencyOrMixed);
  EXPECT_EQ(ClassifyThroughput(0.10, 0.75), Verdict::kLatencyOrMixed);
}

TEST(ProfilerRooflineTest, ComputeBoundNeedsHighSmAndModerateDram) {
  EXPECT_EQ(ClassifyThroughput(0.90, 0.20), Verdict::kComputeBound);
  EXPECT_EQ(ClassifyThroughput(0.7501, 0.4999), Verdict::kComputeBound);
  EXPECT_EQ(ClassifyThroughput(0.75, 0.20), Verdict::kLatencyOrMixed);
  EXPECT_EQ(ClassifyThroughput(0.90, 0.50), Verdict::kLatencyOrMixed);
}

TEST(ProfilerRooflineTest, EverythingElseIsLatencyOrMixed) {
  EXPECT_EQ(ClassifyThroughput(0.05, 0.05), Verdict::kLatencyOrMixed);
  EXPECT_EQ(ClassifyThroughput(0.50, 0.60), Verdict::kLatencyOrMixed);
  EXPECT_EQ(ClassifyThroughput(0.90, 0.90), Verdict::kLatencyOrMixed);
}

TEST(ProfilerRooflineTest, VerdictsCarryTheSeedsRemedies) {
  EXPECT_STREQ(VerdictName(Verdict::kMemoryBound), "memory-bound");
  EXPECT_STREQ(VerdictName(Verdict::kComputeBound), "compute-bound");
  EXPECT_STREQ(VerdictName(Verdict::kLatencyOrMixed), "latency-or-mixed");
  const std::string memory = VerdictRemedy(Verdict::kMemoryBound);
  EXPECT_NE(memory.find("kernel fusion"), std::string::npos);
  EXPECT_NE(memory.find("FP8/INT4"), std::string::npos);
  EXPECT_NE(memory.find("larger batch"), std::string::npos);
  const std::string compute = VerdictRemedy(Verdict::kComputeBound);
  EXPECT_NE(compute.find("FP8/NVFP4"), std::string::npos);
  EXPECT_NE(compute.find("64/128"), std::string::npos);
  EXPECT_NE(compute.find("bigger GPU"), std::string::npos);
  EXPECT_FALSE(std::string(VerdictRemedy(Verdict::kLatencyOrMixed)).empty());
}

v1::KernelStat Row(double flops, double bytes, double seconds) {
  v1::KernelStat row;
  row.set_name("op");
  row.set_phase("forward");
  row.set_flops(flops);
  row.set_bytes(bytes);
  row.set_total_seconds(seconds);
  return row;
}

TEST(ProfilerRooflineTest, AnalyticRatiosAreAchievedRatesOverPeaks) {
  const RooflinePeaks peaks{1e12, 1e11};
  // 8e11 FLOP/s and 1e10 B/s: 80 % of the compute peak, 10 % of the memory peak.
  v1::KernelStat gemm = Row(8e11, 1e10, 1.0);
  ApplyAnalyticRoofline(peaks, &gemm);
  EXPECT_DOUBLE_EQ(gemm.sm_throughput_ratio(), 0.8);
  EXPECT_DOUBLE_EQ(gemm.dram_throughput_ratio(), 0.1);
  EXPECT_DOUBLE_EQ(gemm.memory_throughput_ratio(), 0.1);
  EXPECT_EQ(gemm.tensor_pipe_ratio(), -1.0);
  EXPECT_EQ(gemm.verdict(), "compute-bound");
  EXPECT_EQ(gemm.remedy(), VerdictRemedy(Verdict::kComputeBound));
  EXPECT_EQ(gemm.source(), kSourceAnalytic);

  // 4e9 FLOP in 0.5 s, 4.5e10 bytes in 0.5 s: 0.8 % and 90 %.
  v1::KernelStat norm = Row(4e9, 4.5e10, 0.5);
  ApplyAnalyticRoofline(peaks, &norm);
  EXPECT_DOUBLE_EQ(norm.sm_throughput_ratio(), 0.008);
  EXPECT_DOUBLE_EQ(norm.dram_throughput_ratio(), 0.9);
  EXPECT_EQ(norm.verdict(), "memory-bound");
}

TEST(ProfilerRooflineTest, Fp8OpsAreHeldToTheFp8PeakWhereTheDeviceHasOne) {
  // 1.5e12 FLOP/s: 75 % of a 2e12 FP8 peak, and the bf16 row of the same rate is clamped at 1.
  v1::KernelStat fp8 = Row(1.5e12, 1e9, 1.0);
  fp8.set_name("fp8_linear_forward");
  ApplyAnalyticRoofline(RooflinePeaks{1e12, 1e11, 2e12}, &fp8);
  EXPECT_DOUBLE_EQ(fp8.sm_throughput_ratio(), 0.75);
  v1::KernelStat bf16 = Row(1.5e12, 1e9, 1.0);
  bf16.set_name("linear_forward");
  ApplyAnalyticRoofline(RooflinePeaks{1e12, 1e11, 2e12}, &bf16);
  EXPECT_DOUBLE_EQ(bf16.sm_throughput_ratio(), 1.0);
  // Without an FP8 peak (the CPU backend emulates the products) the bf16 peak holds.
  v1::KernelStat emulated = Row(5e11, 1e9, 1.0);
  emulated.set_name("fp8_linear_backward");
  ApplyAnalyticRoofline(RooflinePeaks{1e12, 1e11}, &emulated);
  EXPECT_DOUBLE_EQ(emulated.sm_throughput_ratio(), 0.5);
}

TEST(ProfilerRooflineTest, RatiosAreClampedToOne) {
  // Cache-resident data can move faster than the DRAM copy rate.
  v1::KernelStat row = Row(0.0, 5e11, 1.0);
  ApplyAnalyticRoofline(RooflinePeaks{1e12, 1e11}, &row);
  EXPECT_DOUBLE_EQ(row.dram_throughput_ratio(), 1.0);
  EXPECT_DOUBLE_EQ(row.sm_throughput_ratio(), 0.0);
}

TEST(ProfilerRooflineTest, UnknownCostsOrPeaksGiveTimingsOnly) {
  v1::KernelStat collective = Row(-1.0, 1e9, 1.0);
  collective.set_phase("comm");
  ApplyAnalyticRoofline(RooflinePeaks{1e12, 1e11}, &collective);
  EXPECT_EQ(collective.sm_throughput_ratio(), -1.0);
  EXPECT_EQ(collective.dram_throughput_ratio(), -1.0);
  EXPECT_EQ(collective.verdict(), "");
  EXPECT_EQ(collective.source(), kSourceHostTimer);
  EXPECT_EQ(collective.remedy(), CommunicationRemedy());

  v1::KernelStat no_peaks = Row(1e9, 1e9, 1.0);
  ApplyAnalyticRoofline(RooflinePeaks{}, &no_peaks);
  EXPECT_EQ(no_peaks.source(), kSourceHostTimer);
  EXPECT_EQ(no_peaks.verdict(), "");
}

TEST(ProfilerRooflineTest, CounterRatiosGetTheSameVerdicts) {
  v1::KernelStat row;
  row.set_sm_throughput_ratio(0.1);
  row.set_dram_throughput_ratio(0.8);
  ApplyVerdict(&row);
  EXPECT_EQ(row.verdict(), "memory-bound");
  EXPECT_EQ(row.remedy(), VerdictRemedy(Verdict::kMemoryBound));
}

TEST(ProfilerRooflineTest, MeasuresAPositiveMemoryBandwidth) {
  absl::StatusOr<double> bandwidth = MeasureHostMemoryBandwidth();
  ASSERT_TRUE(bandwidth.ok()) << bandwidth.status();
  // Any machine that runs this copies faster than 100 MB/s and slower than 100 TB/s.
  EXPECT_GT(*bandwidth, 1e8);
  EXPECT_LT(*bandwidth, 1e14);
}

// The roof is an upper bound for what the CPU backend's ops reach: an elementwise add of operands
// that stay in the caches (the demo's residual add: three 256 KiB tensors) moves its bytes no
// faster than the measured peak. A DRAM copy rate alone is slower than such an add.
TEST(ProfilerRooflineTest, TheMemoryRoofBoundsACacheResidentAdd) {
  constexpr int64_t kCount = 65536;
  std::vector<float> a(kCount, 1.0f), b(kCount, 2.0f), out(kCount, 0.0f);
  double best_rate = 0.0;
  for (int repeat = 0; repeat < 5; ++repeat) {
    constexpr int kPasses = 200;
    const auto start = std::chrono::steady_clock::now();
    for (int pass = 0; pass < kPasses; ++pass) {
      cpu::Add(a.data(), b.data(), kCount, out.data());
      asm volatile("" : : "r"(out.data()) : "memory");
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best_rate = std::max(best_rate, 3.0 * sizeof(float) * kCount * kPasses / seconds);
  }
  // Some slack for a busy machine: both are best-of measurements taken a moment apart, and
  // the roof gets up to three tries, since other processes may take the cores during one (a
  // roof that is only a DRAM copy rate stays below the add in every try).
  double roof = 0.0;
  for (int attempt = 0; attempt < 3 && roof < 0.8 * best_rate; ++attempt) {
    absl::StatusOr<double> measured = MeasureHostMemoryBandwidth();
    ASSERT_TRUE(measured.ok()) << measured.status();
    roof = std::max(roof, *measured);
  }
  EXPECT_GE(roof, 0.8 * best_rate)
      << "roof " << roof / 1e9 << " GB/s, cache-resident add " << best_rate / 1e9 << " GB/s";
  std::printf("memory roof %.1f GB/s; a cache-resident add %.1f GB/s\n", roof / 1e9,
              best_rate / 1e9);
}

}  // namespace
}  // namespace fsdpd
