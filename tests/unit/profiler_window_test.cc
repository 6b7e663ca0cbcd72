// When windows open and close, which requests are accepted, and the reports a window sends.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "worker/profiler/profile_window.h"

namespace fsdpd {
namespace {

ProfileWindowOptions Options() {
  ProfileWindowOptions options;
  options.job_id = "job";
  options.attempt = 2;
  options.rank = 1;
  options.device = "cpu";
  options.peak_flops_per_second = 1e9;
  options.peak_bytes_per_second = 1e9;  // no bandwidth measurement in these tests
  options.max_trace_chunk_bytes = 256;
  return options;
}

// Runs steps first..last, recording one op per step; returns the steps that were recorded and
// every report sent.
std::vector<int64_t> RunSteps(ProfileWindow& window, ProfileRecorder& recorder, int64_t first,
                              int64_t last, std::vector<v1::ProfileReport>* reports) {
  std::vector<int64_t> recorded;
  const OpCost cost{1e6, 1e6};
  for (int64_t step = first; step <= last; ++step) {
    window.BeginStep(step);
    if (window.recording()) recorded.push_back(step);
    recorder.RecordOp("linear_forward", ProfileLane::kCompute, step, 1e-3, &cost, "");
    for (v1::ProfileReport& report : window.EndStep(step)) reports->push_back(report);
  }
  return recorded;
}

TEST(ProfilerWindowTest, TheSpecWindowCoversItsSteps) {
  ProfileRecorder recorder;
  ProfileWindow window(&recorder, Options());
  window.Schedule(/*start_step=*/3, /*steps=*/2);
  std::vector<v1::ProfileReport> reports;
  EXPECT_EQ(RunSteps(window, recorder, 1, 6, &reports), (std::vector<int64_t>{3, 4}));
  ASSERT_GE(reports.size(), 2u);
  const v1::ProfileReport& table = reports[0];
  EXPECT_EQ(table.job_id(), "job");
  EXPECT_EQ(table.attempt(), 2);
  EXPECT_EQ(table.rank(), 1);
  EXPECT_EQ(table.start_step(), 3);
  EXPECT_EQ(table.steps(), 2);
  ASSERT_EQ(table.kernels_size(), 1);
  EXPECT_EQ(table.kernels(0).calls(), 2);
  EXPECT_TRUE(table.trace_chunk().empty());
  // Then the trace in order, only the last marked.
  std::string trace;
  for (size_t i = 1; i < reports.size(); ++i) {
    EXPECT_EQ(reports[i].kernels_size(), 0);
    EXPECT_EQ(reports[i].trace_chunk_index(), static_cast<int64_t>(i - 1));
    EXPECT_EQ(reports[i].trace_last(), i + 1 == reports.size());
    EXPECT_LE(reports[i].trace_chunk().size(), 256u);
    trace += reports[i].trace_chunk();
  }
  const nlohmann::json parsed = nlohmann::json::parse(trace);
  EXPECT_EQ(parsed["otherData"]["start_step"], 3);
}

TEST(ProfilerWindowTest, StartStepZeroMeansTheFirstStep) {
  ProfileRecorder recorder;
  ProfileWindow window(&recorder, Options());
  window.Schedule(0, 2);
  std::vector<v1::ProfileReport> reports;
  EXPECT_EQ(RunSteps(window, recorder, 1, 4, &reports), (std::vector<int64_t>{1, 2}));
}

TEST(ProfilerWindowTest, AResumeInsideTheWindowProfilesTheRest) {
  ProfileRecorder recorder;
  ProfileWindow window(&recorder, Options());
  window.Schedule(3, 3);
  window.Schedule(1, 1);  // wholly before the resume: dropped
  std::vector<v1::ProfileReport> reports;
  EXPECT_EQ(RunSteps(window, recorder, 4, 8, &reports), (std::vector<int64_t>{4, 5}));
  ASSERT_FALSE(reports.empty());
  EXPECT_EQ(reports[0].start_step(), 4);
  EXPECT_EQ(reports[0].steps(), 2);
}

TEST(ProfilerWindowTest, NoStepsSchedulesNothing) {
  ProfileRecorder recorder;
  ProfileWindow window(&recorder, Options());
  window.Schedule(1, 0);
  std::vector<v1::ProfileReport> reports;
  EXPECT_TRUE(RunSteps(window, recorder, 1, 3, &reports).empty());
  EXPECT_TRUE(reports.empty());
}

TEST(ProfilerWindowTest, RequestsAreCheckedAndStartNoEarlierThanTheNextStep) {
  ProfileRecorder recorder;
  ProfileWindow window(&recorder, Options());
  v1::ProfileRequest request;
  request.set_job_id("other");
  request.set_steps(1);
  EXPECT_EQ(window.Request(request, 5).code(), absl::StatusCode::kInvalidArgument);
  request.set_job_id("job");
  request.set_attempt(1);
  EXPECT_EQ(window.Request(request, 5).code(), absl::StatusCode::kInvalidArgument);
  request.set_attempt(2);
  request.set_steps(0);
  EXPECT_EQ(window.Request(request, 5).code(), absl::StatusCode::kInvalidArgument);
  request.set_steps(kMaxProfileSteps + 1);
  EXPECT_EQ(window.Request(request, 5).code(), absl::StatusCode::kInvalidArgument);
  request.set_steps(2);
  request.set_start_step(0);
  ASSERT_TRUE(window.Request(request, 5).ok());
  std::vector<v1::ProfileReport> reports;
  EXPECT_EQ(RunSteps(window, recorder, 5, 5, &reports), (std::vector<int64_t>{5}));
  // While recording, another request is refused.
  EXPECT_EQ(window.Request(request, 6).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(RunSteps(window, recorder, 6, 9, &reports), (std::vector<int64_t>{6}));
  ASSERT_FALSE(reports.empty());
  EXPECT_EQ(reports[0].start_step(), 5);
  EXPECT_EQ(reports[0].steps(), 2);
}

TEST(ProfilerWindowTest, FinishReportsAWindowCutShortByTheLastStep) {
  ProfileRecorder recorder;
  ProfileWindow window(&recorder, Options());
  window.Schedule(2, 10);
  std::vector<v1::ProfileReport> reports;
  EXPECT_EQ(RunSteps(window, recorder, 1, 3, &reports), (std::vector<int64_t>{2, 3}));
  EXPECT_TRUE(reports.empty());
  reports = window.Finish();
  ASSERT_GE(reports.size(), 2u);
  EXPECT_EQ(reports[0].steps(), 2);
  EXPECT_TRUE(reports.back().trace_last());
  EXPECT_FALSE(window.recording());
  EXPECT_TRUE(window.Finish().empty());
}

}  // namespace
}  // namespace fsdpd
