// The Chrome trace parses back as JSON with well-formed events, and its chunks reassemble it.
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "worker/profiler/chrome_trace.h"

namespace fsdpd {
namespace {

using Json = nlohmann::json;

std::vector<ProfileEvent> SomeEvents(int count) {
  std::vector<ProfileEvent> events;
  for (int i = 0; i < count; ++i) {
    ProfileEvent event;
    event.name = i % 3 == 0 ? "all_gather" : "linear_forward";
    event.unit = "layers." + std::to_string(i % 4);
    event.phase = i % 3 == 0 ? "comm" : "forward";
    event.lane = i % 3 == 0 ? ProfileLane::kComm : ProfileLane::kCompute;
    event.start_seconds = 1000.0 + i * 1e-3;
    event.duration_seconds = 5e-4;
    event.flops = i % 3 == 0 ? -1.0 : 1e6;
    event.bytes = 4096;
    event.shapes = "f32[8, 16]";
    events.push_back(event);
  }
  ProfileEvent range;
  range.name = "step 7";
  range.lane = ProfileLane::kHost;
  range.start_seconds = 1000.0;
  range.duration_seconds = 0.5;
  events.push_back(range);
  return events;
}

TEST(ProfilerChromeTraceTest, ParsesBackWithWellFormedEvents) {
  ChromeTraceInfo info;
  info.job_id = "job-1";
  info.rank = 2;
  info.device = "cpu";
  info.start_step = 7;
  info.steps = 1;
  info.dropped_events = 4;
  const std::vector<ProfileEvent> events = SomeEvents(10);
  const Json trace = Json::parse(BuildChromeTrace(events, info));
  EXPECT_EQ(trace["displayTimeUnit"], "ms");
  EXPECT_EQ(trace["otherData"]["dropped_events"], 4);
  EXPECT_EQ(trace["otherData"]["job_id"], "job-1");
  const Json& trace_events = trace["traceEvents"];
  ASSERT_TRUE(trace_events.is_array());
  int complete = 0;
  std::set<std::string> thread_names;
  for (const Json& event : trace_events) {
    EXPECT_EQ(event["pid"], 2);
    ASSERT_TRUE(event.contains("ph"));
    ASSERT_TRUE(event.contains("name"));
    if (event["ph"] == "M") {
      if (event["name"] == "thread_name") thread_names.insert(event["args"]["name"]);
      continue;
    }
    EXPECT_EQ(event["ph"], "X");
    ASSERT_TRUE(event["ts"].is_number());
    ASSERT_TRUE(event["dur"].is_number());
    EXPECT_GE(event["dur"].get<double>(), 0.0);
    const int tid = event["tid"];
    if (event["name"] == "all_gather") {
      EXPECT_EQ(tid, static_cast<int>(ProfileLane::kComm));
      EXPECT_EQ(event["cat"], "comm");
      EXPECT_FALSE(event["args"].contains("flops"));
    } else if (event["name"] == "linear_forward") {
      EXPECT_EQ(tid, static_cast<int>(ProfileLane::kCompute));
      EXPECT_EQ(event["args"]["phase"], "forward");
      EXPECT_EQ(event["args"]["flops"], 1e6);
    } else {
      EXPECT_EQ(event["name"], "step 7");
      EXPECT_EQ(tid, static_cast<int>(ProfileLane::kHost));
      EXPECT_DOUBLE_EQ(event["ts"].get<double>(), 1000.0 * 1e6);
      EXPECT_DOUBLE_EQ(event["dur"].get<double>(), 0.5 * 1e6);
    }
    ++complete;
  }
  EXPECT_EQ(complete, static_cast<int>(events.size()));
  EXPECT_EQ(thread_names.size(), 3u);
}

TEST(ProfilerChromeTraceTest, ChunksConcatenateToTheWholeTrace) {
  const std::string trace = BuildChromeTrace(SomeEvents(500), ChromeTraceInfo{});
  const size_t limit = 4096;
  ASSERT_GT(trace.size(), 3 * limit);
  const std::vector<std::string> chunks = SplitIntoChunks(trace, limit);
  EXPECT_EQ(chunks.size(), (trace.size() + limit - 1) / limit);
  std::string joined;
  for (const std::string& chunk : chunks) {
    EXPECT_LE(chunk.size(), limit);
    EXPECT_FALSE(chunk.empty());
    joined += chunk;
  }
  EXPECT_EQ(joined, trace);
  EXPECT_NO_THROW(Json::parse(joined));
}

TEST(ProfilerChromeTraceTest, AnEmptyTextIsOneEmptyChunk) {
  const std::vector<std::string> chunks = SplitIntoChunks("", 16);
  ASSERT_EQ(chunks.size(), 1u);
  EXPECT_TRUE(chunks[0].empty());
  EXPECT_EQ(SplitIntoChunks("abc", 16), std::vector<std::string>{"abc"});
}

TEST(ProfilerChromeTraceTest, InvalidUtf8InNamesDoesNotBreakTheTrace) {
  ChromeTraceInfo info;
  info.job_id = std::string("job-\xff\xfe");
  EXPECT_NO_THROW(Json::parse(BuildChromeTrace(SomeEvents(2), info)));
}

}  // namespace
}  // namespace fsdpd
