// A profiling window as a Chrome trace (JSON object format, opens in Perfetto and
// chrome://tracing): {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}.
// Every event is a complete ("X") event with pid = rank and tid = lane: 0 the worker's host
// ranges (step, unit, phase), 1 the compute stream's ops, 2 the comm stream's ops and
// collectives; metadata ("M") events name the process and the threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "worker/profiler/profile_event.h"

namespace fsdpd {

// ProfileReport.trace_chunk's size limit, well under gRPC's 4 MiB default message size.
inline constexpr size_t kMaxTraceChunkBytes = size_t{1} << 20;

struct ChromeTraceInfo {
  std::string job_id;
  int rank = 0;
  std::string device;
  int64_t start_step = 0;
  int64_t steps = 0;
  // Events left out by the recorder's cap; recorded in otherData so a reader knows.
  int64_t dropped_events = 0;
  // Where op times come from ("host-timer", "cupti-activity") and where the throughput ratios
  // come from ("cupti-range-profiler", or why counters are missing and the estimate is used).
  std::string timing = "host-timer";
  std::string counters;
  // The step replayed for counters (its kernels are not in the table's times); 0: none.
  int64_t counter_step = 0;
  // Device kernels neither tagged nor matched to a launch site (no unit, no phase).
  int64_t unattributed_kernels = 0;
};

// Timestamps are microseconds on the steady clock, so the traces of ranks on one host line up.
std::string BuildChromeTrace(const std::vector<ProfileEvent>& events, const ChromeTraceInfo& info);

// Consecutive pieces of at most max_chunk_bytes (> 0) whose concatenation is `text`; an empty
// text gives one empty chunk, so there is always a last one to mark.
std::vector<std::string> SplitIntoChunks(const std::string& text,
                                         size_t max_chunk_bytes = kMaxTraceChunkBytes);

}  // namespace fsdpd
