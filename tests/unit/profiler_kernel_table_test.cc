// Events become the kernel table: grouping by (name, unit, phase), calls, totals, shares and
// order; and the recorder attributes ops to the unit and phase its ranges declare.
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "worker/profiler/kernel_table.h"
#include "worker/profiler/profile_recorder.h"

namespace fsdpd {
namespace {

ProfileEvent Op(const std::string& name, const std::string& unit, const std::string& phase,
                double seconds, double flops = 1.0, double bytes = 1.0) {
  ProfileEvent event;
  event.name = name;
  event.unit = unit;
  event.phase = phase;
  event.lane = phase == "comm" ? ProfileLane::kComm : ProfileLane::kCompute;
  event.duration_seconds = seconds;
  event.flops = flops;
  event.bytes = bytes;
  return event;
}

TEST(ProfilerKernelTableTest, GroupsByNameUnitAndPhaseAndSortsByTotal) {
  KernelTableBuilder builder;
  builder.Add(Op("linear_forward", "layers.0", "forward", 0.010));
  builder.Add(Op("linear_forward", "layers.0", "forward", 0.030));
  builder.Add(Op("linear_forward", "layers.1", "forward", 0.020));
  builder.Add(Op("linear_backward", "layers.0", "backward", 0.100));
  builder.Add(Op("all_gather", "layers.0", "comm", 0.035, -1.0, 64.0));
  ProfileEvent range = Op("step 3", "", "", 5.0);
  range.lane = ProfileLane::kHost;
  builder.Add(range);  // a host range, not an op: left out

  const std::vector<v1::KernelStat> table = builder.Build(nullptr);
  ASSERT_EQ(table.size(), 4u);
  EXPECT_EQ(table[0].name(), "linear_backward");
  EXPECT_EQ(table[1].name(), "linear_forward");
  EXPECT_EQ(table[1].unit(), "layers.0");
  EXPECT_EQ(table[1].calls(), 2);
  EXPECT_DOUBLE_EQ(table[1].total_seconds(), 0.040);
  EXPECT_DOUBLE_EQ(table[1].flops(), 2.0);
  EXPECT_EQ(table[2].name(), "all_gather");
  EXPECT_EQ(table[2].phase(), "comm");
  EXPECT_EQ(table[2].flops(), -1.0);
  EXPECT_DOUBLE_EQ(table[2].bytes(), 64.0);
  EXPECT_EQ(table[3].unit(), "layers.1");
  EXPECT_EQ(table[3].calls(), 1);

  const double all = 0.010 + 0.030 + 0.020 + 0.100 + 0.035;
  EXPECT_NEAR(table[0].percent_of_total(), 100.0 * 0.100 / all, 1e-9);
  EXPECT_NEAR(table[3].percent_of_total(), 100.0 * 0.020 / all, 1e-9);
  double sum = 0.0;
  for (const v1::KernelStat& row : table) sum += row.percent_of_total();
  EXPECT_NEAR(sum, 100.0, 1e-9);
  for (size_t i = 1; i < table.size(); ++i) {
    EXPECT_GE(table[i - 1].total_seconds(), table[i].total_seconds());
  }
}

TEST(ProfilerKernelTableTest, EqualTotalsAreOrderedByNameUnitAndPhase) {
  KernelTableBuilder builder;
  builder.Add(Op("silu_forward", "layers.1", "forward", 0.5));
  builder.Add(Op("add", "layers.1", "forward", 0.5));
  builder.Add(Op("add", "layers.0", "forward", 0.5));
  const std::vector<v1::KernelStat> table = builder.Build(nullptr);
  ASSERT_EQ(table.size(), 3u);
  EXPECT_EQ(table[0].name() + "/" + table[0].unit(), "add/layers.0");
  EXPECT_EQ(table[1].name() + "/" + table[1].unit(), "add/layers.1");
  EXPECT_EQ(table[2].name() + "/" + table[2].unit(), "silu_forward/layers.1");
}

TEST(ProfilerKernelTableTest, PeaksAddVerdicts) {
  KernelTableBuilder builder;
  // 9e9 FLOP/s of 1e10 and 1e8 B/s of 1e10: compute-bound.
  builder.Add(Op("linear_forward", "layers.0", "forward", 1.0, 9e9, 1e8));
  builder.Add(Op("all_gather", "layers.0", "comm", 0.5, -1.0, 1e8));
  const RooflinePeaks peaks{1e10, 1e10};
  const std::vector<v1::KernelStat> table = builder.Build(&peaks);
  ASSERT_EQ(table.size(), 2u);
  EXPECT_EQ(table[0].verdict(), "compute-bound");
  EXPECT_EQ(table[0].source(), kSourceAnalytic);
  EXPECT_EQ(table[1].verdict(), "");
  EXPECT_EQ(table[1].source(), kSourceHostTimer);
}

TEST(ProfilerKernelTableTest, CounterReadingsReplaceTheEstimateWeightedByDuration) {
  KernelTableBuilder builder;
  const ProfileEvent short_launch = Op("gemm", "layers.0", "forward", 1.0, 9e9, 1e8);
  const ProfileEvent long_launch = Op("gemm", "layers.0", "forward", 3.0, 9e9, 1e8);
  builder.Add(short_launch);
  builder.Add(long_launch);
  builder.AddCounters(short_launch, CounterRatios{0.2, 0.9, 0.9, -1.0});
  builder.AddCounters(long_launch, CounterRatios{0.1, 0.7, 0.8, -1.0});
  builder.Add(Op("rmsnorm_forward", "layers.0", "forward", 1.0, 1.0, 1e10));
  const RooflinePeaks peaks{1e10, 1e10};
  const std::vector<v1::KernelStat> table = builder.Build(&peaks);
  ASSERT_EQ(table.size(), 2u);
  const v1::KernelStat& gemm = table[0];
  EXPECT_EQ(gemm.calls(), 2);
  EXPECT_EQ(gemm.source(), kSourceCupti);
  EXPECT_DOUBLE_EQ(gemm.sm_throughput_ratio(), (0.2 * 1 + 0.1 * 3) / 4);
  EXPECT_DOUBLE_EQ(gemm.memory_throughput_ratio(), (0.9 * 1 + 0.7 * 3) / 4);
  EXPECT_DOUBLE_EQ(gemm.dram_throughput_ratio(), (0.9 * 1 + 0.8 * 3) / 4);
  EXPECT_EQ(gemm.tensor_pipe_ratio(), -1.0);
  EXPECT_EQ(gemm.verdict(), "memory-bound");  // 12.5 % SM, 82.5 % DRAM
  // A row without readings keeps the analytic estimate.
  EXPECT_EQ(table[1].source(), kSourceAnalytic);
}

TEST(ProfilerKernelTableTest, RecorderAttributesOpsToTheInnermostRange) {
  ProfileRecorder recorder;
  const OpCost cost{2.0, 8.0};
  recorder.RecordOp("before_start", ProfileLane::kCompute, 0.0, 1.0, &cost, "");
  recorder.Start();
  {
    ProfileRange block(&recorder, "layers.0", "forward");
    recorder.RecordOp("linear_forward", ProfileLane::kCompute, 0.0, 1.0, &cost, "f32[2, 2]");
    {
      ProfileRange gather(&recorder, "layers.1", "comm", "all-gather");
      recorder.RecordOp("cast", ProfileLane::kComm, 0.0, 1.0, &cost, "");
      recorder.RecordOp("all_gather", ProfileLane::kComm, 0.0, 1.0, nullptr, "", "comm");
    }
    recorder.RecordOp("add", ProfileLane::kCompute, 0.0, 1.0, &cost, "");
  }
  recorder.RecordOp("outside", ProfileLane::kCompute, 0.0, 1.0, &cost, "");
  recorder.Stop();
  recorder.RecordOp("after_stop", ProfileLane::kCompute, 0.0, 1.0, &cost, "");

  const std::vector<v1::KernelStat> table = recorder.table().Build(nullptr);
  std::map<std::string, std::pair<std::string, std::string>> where;
  for (const v1::KernelStat& row : table) where[row.name()] = {row.unit(), row.phase()};
  ASSERT_EQ(where.size(), 5u);
  EXPECT_EQ(where["linear_forward"],
            std::make_pair(std::string("layers.0"), std::string("forward")));
  EXPECT_EQ(where["cast"], std::make_pair(std::string("layers.1"), std::string("comm")));
  EXPECT_EQ(where["all_gather"], std::make_pair(std::string("layers.1"), std::string("comm")));
  EXPECT_EQ(where["add"], std::make_pair(std::string("layers.0"), std::string("forward")));
  EXPECT_EQ(where["outside"], std::make_pair(std::string(), std::string()));

  // The two ranges are on the host lane with their names, inner one ending first.
  std::vector<std::string> ranges;
  for (const ProfileEvent& event : recorder.trace_events()) {
    if (event.lane == ProfileLane::kHost) ranges.push_back(event.name);
  }
  EXPECT_EQ(ranges, (std::vector<std::string>{"layers.1 all-gather", "layers.0 forward"}));
}

TEST(ProfilerKernelTableTest, InactiveRangesDoNothing) {
  ProfileRecorder recorder;
  {
    ProfileRange range(&recorder, "layers.0", "forward");
    EXPECT_EQ(recorder.unit(), "");
  }
  ProfileRange null_range(nullptr, "layers.0", "forward");
  EXPECT_TRUE(recorder.trace_events().empty());
  EXPECT_TRUE(recorder.table().empty());
}

TEST(ProfilerKernelTableTest, TheTraceIsCappedButTheTableCountsEverything) {
  ProfileRecorder recorder(/*max_trace_events=*/3);
  recorder.Start();
  const OpCost cost{1.0, 1.0};
  for (int i = 0; i < 5; ++i) {
    recorder.RecordOp("fill", ProfileLane::kCompute, i, 1.0, &cost, "");
  }
  EXPECT_EQ(recorder.trace_events().size(), 3u);
  EXPECT_EQ(recorder.dropped_trace_events(), 2);
  const std::vector<v1::KernelStat> table = recorder.table().Build(nullptr);
  ASSERT_EQ(table.size(), 1u);
  EXPECT_EQ(table[0].calls(), 5);
  // A new window starts empty.
  recorder.Start();
  EXPECT_TRUE(recorder.trace_events().empty());
  EXPECT_EQ(recorder.dropped_trace_events(), 0);
  EXPECT_TRUE(recorder.table().empty());
}

}  // namespace
}  // namespace fsdpd
