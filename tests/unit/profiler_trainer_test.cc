// RunTrainer with a profiling window on a tiny MiniLLM: the kernel table has the model's ops in
// forward, backward, optimizer and comm, shares adding up to 100 %, analytic roofline verdicts,
// and the trace reassembles into JSON with ranges, compute ops and collectives.
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "proto/spec/job_spec.h"
#include "tests/unit/engine_test_support.h"
#include "worker/comm/file_key_value_store.h"
#include "worker/trainer.h"

namespace fsdpd {
namespace {

v1::JobSpec TinyJob(int64_t steps) {
  v1::JobSpec spec = DefaultJobSpec();
  spec.set_name("profiler-trainer-test");
  spec.mutable_model()->set_vocab(48);
  spec.mutable_model()->set_dim(16);
  spec.mutable_model()->set_layers(2);
  spec.mutable_model()->set_heads(2);
  spec.mutable_model()->set_ffn_mult(2);
  spec.mutable_data()->set_seq_len(8);
  spec.mutable_train()->set_batch_size(2);
  spec.mutable_train()->set_steps(steps);
  spec.mutable_parallel()->set_world_size(1);
  spec.mutable_parallel()->set_device("cpu");
  spec.mutable_checkpoint()->set_every_steps(0);
  spec.mutable_profile()->set_start_step(2);
  spec.mutable_profile()->set_steps(2);
  return spec;
}

class ProfilerTrainerTest : public ::testing::Test {
 protected:
  RankContext Context() const {
    RankContext context;
    context.job_id = "job";
    context.attempt = 1;
    context.checkpoint_dir = dir_.path() + "/job";
    return context;
  }
  testing::TempDir dir_;
};

std::string Trace(const std::vector<v1::ProfileReport>& reports) {
  std::string trace;
  for (size_t i = 1; i < reports.size(); ++i) trace += reports[i].trace_chunk();
  return trace;
}

TEST_F(ProfilerTrainerTest, TheSpecWindowProducesATableAndATrace) {
  std::vector<v1::ProfileReport> reports;
  TrainerHooks hooks;
  hooks.on_profile = [&](const v1::ProfileReport& report) { reports.push_back(report); };
  auto result = RunTrainer(TinyJob(4), Context(), hooks);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_GE(reports.size(), 2u);
  const v1::ProfileReport& table = reports[0];
  EXPECT_EQ(table.job_id(), "job");
  EXPECT_EQ(table.attempt(), 1);
  EXPECT_EQ(table.start_step(), 2);
  EXPECT_EQ(table.steps(), 2);
  EXPECT_EQ(table.device(), "cpu");
  EXPECT_TRUE(reports.back().trace_last());

  std::map<std::string, std::set<std::string>> phases_of;  // op name → phases
  std::set<std::string> units;
  double percent = 0.0;
  for (const v1::KernelStat& row : table.kernels()) {
    phases_of[row.name()].insert(row.phase());
    units.insert(row.unit());
    percent += row.percent_of_total();
    EXPECT_GT(row.calls(), 0);
    EXPECT_GE(row.total_seconds(), 0.0);
    if (row.phase() == "comm" && row.flops() < 0) {
      EXPECT_EQ(row.source(), "host-timer") << row.name();
      EXPECT_EQ(row.verdict(), "") << row.name();
    } else {
      EXPECT_EQ(row.source(), "analytic-estimate") << row.name();
      EXPECT_TRUE(row.verdict() == "memory-bound" || row.verdict() == "compute-bound" ||
                  row.verdict() == "latency-or-mixed")
          << row.name() << ": " << row.verdict();
      EXPECT_FALSE(row.remedy().empty());
      EXPECT_GE(row.sm_throughput_ratio(), 0.0);
      EXPECT_LE(row.sm_throughput_ratio(), 1.0);
      EXPECT_GE(row.dram_throughput_ratio(), 0.0);
      EXPECT_LE(row.dram_throughput_ratio(), 1.0);
    }
  }
  EXPECT_NEAR(percent, 100.0, 1e-6);
  for (int i = 1; i < table.kernels_size(); ++i) {
    EXPECT_GE(table.kernels(i - 1).total_seconds(), table.kernels(i).total_seconds());
  }
  EXPECT_EQ(phases_of["linear_forward"], std::set<std::string>{"forward"});
  EXPECT_EQ(phases_of["linear_backward"], std::set<std::string>{"backward"});
  EXPECT_EQ(phases_of["attention_forward"], std::set<std::string>{"forward"});
  EXPECT_EQ(phases_of["attention_backward"], std::set<std::string>{"backward"});
  // Backward recomputes the norms' outputs (MiniLLM keeps only their inputs), so
  // rmsnorm_forward may also show up in backward.
  EXPECT_EQ(phases_of["rmsnorm_forward"].count("forward"), 1u);
  EXPECT_EQ(phases_of["rmsnorm_backward"], std::set<std::string>{"backward"});
  EXPECT_EQ(phases_of["adamw"], std::set<std::string>{"optimizer"});
  EXPECT_EQ(phases_of["all_gather"], std::set<std::string>{"comm"});
  // One rank hands its unsharded gradient to AdamW as the shard: there is no reduce-scatter.
  EXPECT_EQ(phases_of.count("reduce_scatter"), 0u);
  EXPECT_EQ(units, (std::set<std::string>{"", "layers.0", "layers.1", "root"}));
  // Two steps, each with one forward of every linear per block: 4 linears × 2 blocks × 2 steps.
  for (const v1::KernelStat& row : table.kernels()) {
    if (row.name() == "linear_forward" && row.unit() == "layers.0") {
      EXPECT_EQ(row.calls(), 8);
    }
    if (row.name() == "attention_forward") {
      EXPECT_EQ(row.calls(), 2);
    }
  }

  const nlohmann::json trace = nlohmann::json::parse(Trace(reports));
  std::set<std::string> ranges;
  std::set<std::string> range_phases;
  std::set<int> lanes;
  for (const nlohmann::json& event : trace["traceEvents"]) {
    if (event["ph"] != "X") continue;
    lanes.insert(event["tid"].get<int>());
    if (event["cat"] == "range") {
      ranges.insert(event["name"].get<std::string>());
      if (event["args"].contains("phase")) range_phases.insert(event["args"]["phase"]);
    }
  }
  EXPECT_EQ(lanes, (std::set<int>{0, 1, 2}));
  for (const char* name : {"step 2", "step 3", "layers.0 forward", "layers.1 backward",
                           "layers.0 all-gather", "root head and loss"}) {
    EXPECT_EQ(ranges.count(name), 1u) << name;
  }
  EXPECT_EQ(ranges.count("layers.0 reduce-scatter"), 0u);
  // The optimizer's range is named after what it does (the step, or the grad norm when AdamW
  // runs inside backward); its phase is the optimizer's either way.
  EXPECT_EQ(range_phases.count("optimizer"), 1u);
  EXPECT_EQ(trace["otherData"]["timing"], "host-timer");
  EXPECT_EQ(ranges.count("step 1"), 0u);
  EXPECT_EQ(ranges.count("step 4"), 0u);
}

TEST_F(ProfilerTrainerTest, ARequestBetweenStepsOpensAWindow) {
  v1::JobSpec spec = TinyJob(4);
  spec.mutable_profile()->set_steps(0);
  std::vector<v1::ProfileReport> reports;
  int polls = 0;
  TrainerHooks hooks;
  hooks.on_profile = [&](const v1::ProfileReport& report) { reports.push_back(report); };
  hooks.poll_profile_request = [&]() -> std::optional<v1::ProfileRequest> {
    if (++polls != 3) return std::nullopt;  // polled before step 3
    v1::ProfileRequest request;
    request.set_job_id("job");
    request.set_steps(1);
    return request;
  };
  auto result = RunTrainer(spec, Context(), hooks);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(polls, 4);
  ASSERT_GE(reports.size(), 2u);
  EXPECT_EQ(reports[0].start_step(), 3);
  EXPECT_EQ(reports[0].steps(), 1);
  EXPECT_GT(reports[0].kernels_size(), 0);
  EXPECT_NO_THROW(nlohmann::json::parse(Trace(reports)));
}

TEST_F(ProfilerTrainerTest, EveryRankOfAWorldProfilesItsOwnCollectives) {
  v1::JobSpec spec = TinyJob(3);
  spec.mutable_parallel()->set_world_size(2);
  spec.mutable_profile()->set_steps(1);
  testing::TempDir store_dir;
  auto store = FileKeyValueStore::Open(store_dir.path());
  ASSERT_TRUE(store.ok()) << store.status();
  std::vector<std::vector<v1::ProfileReport>> reports(2);
  std::vector<absl::Status> statuses(2);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      RankContext context = Context();
      context.rank = rank;
      context.world_size = 2;
      context.store = store->get();
      TrainerHooks hooks;
      hooks.on_profile = [&, rank](const v1::ProfileReport& report) {
        reports[rank].push_back(report);
      };
      statuses[rank] = RunTrainer(spec, context, hooks).status();
    });
  }
  for (std::thread& rank : ranks) rank.join();
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_TRUE(statuses[rank].ok()) << "rank " << rank << ": " << statuses[rank];
    ASSERT_GE(reports[rank].size(), 2u);
    EXPECT_EQ(reports[rank][0].rank(), rank);
    std::map<std::string, int64_t> comm_calls;
    for (const v1::KernelStat& row : reports[rank][0].kernels()) {
      if (row.phase() == "comm") comm_calls[row.name()] += row.calls();
    }
    // Per step: 2 blocks + root reduce-scattered; the last block is gathered once, the others
    // twice (forward and backward).
    EXPECT_EQ(comm_calls["reduce_scatter"], 3);
    EXPECT_EQ(comm_calls["all_gather"], 4);
    EXPECT_GT(comm_calls["all_reduce"], 0);
    const nlohmann::json trace = nlohmann::json::parse(Trace(reports[rank]));
    EXPECT_EQ(trace["otherData"]["rank"], rank);
  }
}

TEST_F(ProfilerTrainerTest, WithoutAProfileHookNothingIsProfiled) {
  std::vector<v1::StepReport> steps;
  TrainerHooks hooks;
  hooks.on_step = [&](const v1::StepReport& report) { steps.push_back(report); };
  auto result = RunTrainer(TinyJob(3), Context(), hooks);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(steps.size(), 3u);
}

// The OS's view of a CPU rank's memory rides along with the allocator's: the resident set holds
// at least the tensors the allocator has out.
TEST_F(ProfilerTrainerTest, StepReportsCarryTheProcessResidentSet) {
  std::vector<v1::StepReport> steps;
  TrainerHooks hooks;
  hooks.on_step = [&](const v1::StepReport& report) { steps.push_back(report); };
  auto result = RunTrainer(TinyJob(2), Context(), hooks);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(steps.size(), 2u);
  for (const v1::StepReport& report : steps) {
    EXPECT_EQ(report.memory_device_used_source(), "process-rss");
    EXPECT_GT(report.memory_device_used_bytes(), report.memory_current_bytes());
    // A test process is far below 64 GiB: a unit mistake (pages, KiB) would show.
    EXPECT_LT(report.memory_device_used_bytes(), int64_t{64} << 30);
  }
}

}  // namespace
}  // namespace fsdpd
