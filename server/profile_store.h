// The latest profiling window of each rank of a job, kept under <artifact_dir>/<job>/ as
// profile-rank-R.pb (the kernel table, a ProfileReport without trace bytes) and
// trace-rank-R.json (the Chrome trace, assembled from its chunks and renamed when complete).
#pragma once

#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fsdpd/v1/profile.pb.h"
#include "server/input_limits.h"

namespace fsdpd::server {

class ProfileStore {
 public:
  // A rank's trace stops growing at max_trace_bytes (input_limits.h): later chunks are refused
  // with RESOURCE_EXHAUSTED, so a rogue worker cannot fill the disk.
  explicit ProfileStore(std::string root, int64_t max_trace_bytes = kMaxTraceBytes)
      : root_(std::move(root)), max_trace_bytes_(max_trace_bytes) {}

  // Stores what the report carries: its kernel table (when it has one) and its trace chunk.
  absl::Status Write(const v1::ProfileReport& report);
  absl::StatusOr<v1::ProfileReport> KernelTable(const std::string& job_id, int rank) const;
  // The path of the latest complete trace.
  absl::StatusOr<std::string> TracePath(const std::string& job_id, int rank) const;

 private:
  std::string Path(const std::string& job_id, const std::string& name, int rank,
                   const std::string& suffix) const;
  const std::string root_;
  const int64_t max_trace_bytes_;
  std::mutex mutex_;
};

}  // namespace fsdpd::server
