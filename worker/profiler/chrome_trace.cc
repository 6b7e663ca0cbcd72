#include "worker/profiler/chrome_trace.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace fsdpd {
namespace {

using Json = nlohmann::json;

Json Metadata(const char* name, int pid, int tid, const std::string& value) {
  return Json{{"name", name}, {"ph", "M"}, {"pid", pid},
              {"tid", tid},   {"ts", 0},   {"args", Json{{"name", value}}}};
}

}  // namespace

std::string BuildChromeTrace(const std::vector<ProfileEvent>& events, const ChromeTraceInfo& info) {
  const int pid = info.rank;
  Json trace_events = Json::array();
  trace_events.push_back(
      Metadata("process_name", pid, 0, absl::StrCat("rank ", info.rank, " (", info.device, ")")));
  trace_events.push_back(Json{{"name", "process_sort_index"},
                              {"ph", "M"},
                              {"pid", pid},
                              {"tid", 0},
                              {"ts", 0},
                              {"args", Json{{"sort_index", info.rank}}}});
  trace_events.push_back(Metadata("thread_name", pid, static_cast<int>(ProfileLane::kHost),
                                  "host: step / unit / phase"));
  trace_events.push_back(
      Metadata("thread_name", pid, static_cast<int>(ProfileLane::kCompute), "compute stream"));
  trace_events.push_back(
      Metadata("thread_name", pid, static_cast<int>(ProfileLane::kComm), "comm stream"));
  for (const ProfileEvent& event : events) {
    Json args = Json::object();
    if (!event.unit.empty()) args["unit"] = event.unit;
    if (!event.phase.empty()) args["phase"] = event.phase;
    if (event.flops >= 0.0) args["flops"] = event.flops;
    if (event.bytes >= 0.0) args["bytes"] = event.bytes;
    if (!event.shapes.empty()) args["shapes"] = event.shapes;
    if (event.stream >= 0) args["stream"] = event.stream;
    if (!event.op.empty()) args["op"] = event.op;
    const char* category = event.lane == ProfileLane::kHost ? "range"
                           : event.phase == "comm"          ? "comm"
                           : event.stream >= 0              ? "kernel"
                                                            : "op";
    trace_events.push_back(Json{{"name", event.name},
                                {"cat", category},
                                {"ph", "X"},
                                {"ts", event.start_seconds * 1e6},
                                {"dur", std::max(event.duration_seconds, 0.0) * 1e6},
                                {"pid", pid},
                                {"tid", static_cast<int>(event.lane)},
                                {"args", std::move(args)}});
  }
  Json trace{{"traceEvents", std::move(trace_events)},
             {"displayTimeUnit", "ms"},
             {"otherData", Json{{"job_id", info.job_id},
                                {"rank", info.rank},
                                {"device", info.device},
                                {"start_step", info.start_step},
                                {"steps", info.steps},
                                {"dropped_events", info.dropped_events},
                                {"timing", info.timing},
                                {"counters", info.counters},
                                {"counter_step", info.counter_step},
                                {"unattributed_kernels", info.unattributed_kernels}}}};
  // Names come from the job; invalid UTF-8 in them must not make the whole trace fail.
  return trace.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::vector<std::string> SplitIntoChunks(const std::string& text, size_t max_chunk_bytes) {
  std::vector<std::string> chunks;
  const size_t size = std::max<size_t>(max_chunk_bytes, 1);
  for (size_t offset = 0; offset < text.size(); offset += size) {
    chunks.push_back(text.substr(offset, size));
  }
  if (chunks.empty()) chunks.emplace_back();
  return chunks;
}

}  // namespace fsdpd
