// Device kernels become kernel-table rows of the unit and phase that launched them: through the
// site id their launch carried, or, when it is missing, through the time of the launching call;
// the counter step's kernels carry counters (paired in launch order), not times.
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "worker/profiler/device_profiler.h"
#include "worker/profiler/profile_recorder.h"

namespace fsdpd {
namespace {

class RecordingTagger : public LaunchTagger {
 public:
  void PushLaunchSite(uint64_t id) override { stack.push_back(id); }
  void PopLaunchSite() override { stack.pop_back(); }
  std::vector<uint64_t> stack;
};

DeviceKernelRecord Kernel(std::string name, uint32_t correlation, uint64_t site, double start,
                          double seconds, uint32_t stream = 7) {
  DeviceKernelRecord kernel;
  kernel.name = std::move(name);
  kernel.correlation_id = correlation;
  kernel.external_id = site;
  kernel.start_seconds = start;
  kernel.duration_seconds = seconds;
  kernel.stream_id = stream;
  return kernel;
}

const v1::KernelStat* Row(const std::vector<v1::KernelStat>& table, const std::string& name,
                          const std::string& unit) {
  for (const v1::KernelStat& row : table) {
    if (row.name() == name && row.unit() == unit) return &row;
  }
  return nullptr;
}

class ProfilerDeviceAttributionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    recorder_.set_launch_tagger(&tagger_);
    recorder_.Start();
  }
  RecordingTagger tagger_;
  ProfileRecorder recorder_;
};

TEST_F(ProfilerDeviceAttributionTest, SitesTagTheirLaunchesAndNest) {
  {
    ProfileRange range(&recorder_, "layers.0", "forward");
    ASSERT_EQ(tagger_.stack, std::vector<uint64_t>{1});
    const uint64_t op = recorder_.OpenSite("linear_forward", ProfileLane::kCompute, true);
    EXPECT_EQ(op, 2u);
    EXPECT_EQ(tagger_.stack, (std::vector<uint64_t>{1, 2}));
    recorder_.CloseSite(op);
    const OpCost cost{100.0, 10.0};
    recorder_.RecordOp("linear_forward", ProfileLane::kCompute, 0.0, 1.0, &cost, "bf16[2, 2]",
                       nullptr, op);
  }
  EXPECT_TRUE(tagger_.stack.empty());
  ASSERT_EQ(recorder_.launch_sites().size(), 2u);
  const LaunchSite& op = recorder_.launch_sites()[1];
  EXPECT_EQ(op.unit, "layers.0");
  EXPECT_EQ(op.phase, "forward");
  EXPECT_TRUE(op.is_op);
  EXPECT_EQ(op.flops, 100.0);
  EXPECT_GE(op.end_seconds, op.start_seconds);
  // Device-timed, a host-timed op is not a row: the device's kernels are.
  EXPECT_TRUE(recorder_.table().empty());
  recorder_.Stop();
  EXPECT_EQ(recorder_.OpenSite("late", ProfileLane::kCompute, true), 0u) << "inactive";
}

TEST_F(ProfilerDeviceAttributionTest, KernelsTakeTheirSitesUnitPhaseLaneAndShareOfTheCost) {
  DeviceWindowRecords records;
  double launch_in_backward = 0.0;
  {
    ProfileRange forward(&recorder_, "layers.0", "forward");
    const uint64_t op = recorder_.OpenSite("linear_forward", ProfileLane::kCompute, true);
    recorder_.CloseSite(op);
    const OpCost cost{300.0, 30.0};
    recorder_.RecordOp("linear_forward", ProfileLane::kCompute, 0.0, 0.0, &cost, "", nullptr, op);
    // Two kernels for one op: 1 ms and 2 ms share its cost 1:2.
    records.kernels.push_back(Kernel("gemm_a", 10, op, 100.0, 0.001));
    records.kernels.push_back(Kernel("gemm_b", 11, op, 100.1, 0.002));
  }
  {
    ProfileRange backward(&recorder_, "layers.1", "backward");
    const uint64_t gather = recorder_.OpenSite("all_gather", ProfileLane::kComm, true, "comm");
    launch_in_backward = ProfileRecorder::Now();
    recorder_.CloseSite(gather);
    // The tag was lost: the launching call's time finds the all-gather, on its comm stream.
    records.kernels.push_back(Kernel("nccl_kernel", 20, 0, 100.2, 0.004, /*stream=*/9));
    records.launch_seconds[20] = launch_in_backward;
  }
  // Neither tag nor launch time: no unit, no phase.
  records.kernels.push_back(Kernel("orphan", 30, 0, 100.3, 0.001));

  const AttributionSummary summary = AttributeDeviceKernels(records, &recorder_);
  EXPECT_EQ(summary.timed_kernels, 4);
  EXPECT_EQ(summary.by_tag, 2);
  EXPECT_EQ(summary.by_launch_time, 1);
  EXPECT_EQ(summary.unattributed, 1);

  RooflinePeaks peaks{1e6, 1e6};
  const std::vector<v1::KernelStat> table = recorder_.table().Build(&peaks);
  const v1::KernelStat* gemm_a = Row(table, "gemm_a", "layers.0");
  const v1::KernelStat* gemm_b = Row(table, "gemm_b", "layers.0");
  const v1::KernelStat* nccl = Row(table, "nccl_kernel", "layers.1");
  const v1::KernelStat* orphan = Row(table, "orphan", "");
  ASSERT_NE(gemm_a, nullptr);
  ASSERT_NE(gemm_b, nullptr);
  ASSERT_NE(nccl, nullptr);
  ASSERT_NE(orphan, nullptr);
  EXPECT_EQ(gemm_a->phase(), "forward");
  EXPECT_NEAR(gemm_a->flops(), 100.0, 1e-9);
  EXPECT_NEAR(gemm_b->flops(), 200.0, 1e-9);
  EXPECT_NEAR(gemm_b->bytes(), 20.0, 1e-9);
  EXPECT_EQ(gemm_a->source(), "analytic-estimate");
  EXPECT_EQ(nccl->phase(), "comm");
  EXPECT_NEAR(nccl->total_seconds(), 0.004, 1e-12);
  EXPECT_EQ(orphan->phase(), "");

  // The trace draws kernels on their stream's lane, with the stream id.
  int kernels_on_comm = 0;
  for (const ProfileEvent& event : recorder_.trace_events()) {
    if (event.name == "nccl_kernel") {
      EXPECT_EQ(event.lane, ProfileLane::kComm);
      EXPECT_EQ(event.stream, 9);
      ++kernels_on_comm;
    }
    if (event.name == "gemm_a") {
      EXPECT_EQ(event.lane, ProfileLane::kCompute);
      EXPECT_EQ(event.op, "linear_forward");
    }
  }
  EXPECT_EQ(kernels_on_comm, 1);
}

TEST_F(ProfilerDeviceAttributionTest, TheCounterStepGivesCountersNotTimes) {
  DeviceWindowRecords records;
  uint64_t norm = 0;
  uint64_t gemm = 0;
  {
    ProfileRange forward(&recorder_, "layers.0", "forward");
    norm = recorder_.OpenSite("rmsnorm_forward", ProfileLane::kCompute, true);
    recorder_.CloseSite(norm);
    gemm = recorder_.OpenSite("linear_forward", ProfileLane::kCompute, true);
    recorder_.CloseSite(gemm);
  }
  records.counter_step_end_seconds = 50.0;
  // The counter step, launched norm then gemm (correlation order); replay reported the norm
  // twice and the records arrive out of order.
  records.kernels.push_back(Kernel("gemm", 2, gemm, 40.0, 9.0));
  records.kernels.push_back(Kernel("rmsnorm", 1, norm, 30.0, 5.0));
  records.kernels.push_back(Kernel("rmsnorm", 1, norm, 35.0, 5.0));
  // A timed step.
  records.kernels.push_back(Kernel("rmsnorm", 3, norm, 60.0, 0.001));
  records.kernels.push_back(Kernel("gemm", 4, gemm, 60.1, 0.003));
  CounterRatios norm_counters{0.10, 0.90, 0.85, 0.0};
  CounterRatios gemm_counters{0.90, 0.30, 0.20, 0.80};
  records.counters = {norm_counters, gemm_counters};

  const AttributionSummary summary = AttributeDeviceKernels(records, &recorder_);
  EXPECT_EQ(summary.timed_kernels, 2);
  EXPECT_EQ(summary.counter_kernels, 2);
  EXPECT_EQ(summary.counter_readings, 2);

  const std::vector<v1::KernelStat> table = recorder_.table().Build(nullptr);
  const v1::KernelStat* norm_row = Row(table, "rmsnorm", "layers.0");
  const v1::KernelStat* gemm_row = Row(table, "gemm", "layers.0");
  ASSERT_NE(norm_row, nullptr);
  ASSERT_NE(gemm_row, nullptr);
  EXPECT_EQ(norm_row->calls(), 1) << "the counter step's launches are not timed";
  EXPECT_NEAR(norm_row->total_seconds(), 0.001, 1e-12);
  EXPECT_EQ(norm_row->source(), "cupti");
  EXPECT_EQ(norm_row->verdict(), "memory-bound");
  EXPECT_NEAR(norm_row->dram_throughput_ratio(), 0.85, 1e-9);
  EXPECT_EQ(gemm_row->source(), "cupti");
  EXPECT_EQ(gemm_row->verdict(), "compute-bound");
  EXPECT_NEAR(gemm_row->tensor_pipe_ratio(), 0.80, 1e-9);
  for (const ProfileEvent& event : recorder_.trace_events()) {
    EXPECT_GE(event.start_seconds, 50.0) << event.name << ": a counter-step kernel in the trace";
  }
}

TEST_F(ProfilerDeviceAttributionTest, FewerReadingsThanKernelsLeaveTheRestEstimated) {
  DeviceWindowRecords records;
  records.counter_step_end_seconds = 50.0;
  records.kernels.push_back(Kernel("first", 1, 0, 10.0, 1.0));
  records.kernels.push_back(Kernel("second", 2, 0, 20.0, 1.0));
  records.kernels.push_back(Kernel("second", 3, 0, 60.0, 1.0));
  records.counters = {CounterRatios{0.5, 0.5, 0.5, -1.0}};
  const AttributionSummary summary = AttributeDeviceKernels(records, &recorder_);
  EXPECT_EQ(summary.counter_kernels, 2);
  EXPECT_EQ(summary.counter_readings, 1);
  const std::vector<v1::KernelStat> table = recorder_.table().Build(nullptr);
  const v1::KernelStat* second = Row(table, "second", "");
  ASSERT_NE(second, nullptr);
  EXPECT_NE(second->source(), "cupti");
  EXPECT_EQ(second->calls(), 1);
  // "first" ran only in the counter step: its reading makes no row of its own.
  EXPECT_EQ(Row(table, "first", ""), nullptr);
  EXPECT_EQ(table.size(), 1u);
}

}  // namespace
}  // namespace fsdpd
