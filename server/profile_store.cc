#include "server/profile_store.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "base/path_component.h"
#include "server/input_limits.h"

namespace fsdpd::server {

namespace fs = std::filesystem;

std::string ProfileStore::Path(const std::string& job_id, const std::string& name, int rank,
                               const std::string& suffix) const {
  return (fs::path(root_) / job_id / absl::StrCat(name, "-rank-", rank, suffix)).string();
}

absl::Status ProfileStore::Write(const v1::ProfileReport& report) {
  if (absl::Status status = CheckPathComponent("profile report job_id", report.job_id());
      !status.ok()) {
    return status;
  }
  if (report.rank() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("profile report has a negative rank (", report.rank(), ")"));
  }
  std::lock_guard<std::mutex> lock(mutex_);
  std::error_code error;
  fs::create_directories(fs::path(root_) / report.job_id(), error);
  if (error)
    return absl::InternalError(absl::StrCat("cannot create profile directory: ", error.message()));
  if (report.kernels_size() > 0) {
    v1::ProfileReport table = report;
    table.clear_trace_chunk();
    table.clear_trace_last();
    table.clear_trace_chunk_index();
    const std::string path = Path(report.job_id(), "profile", report.rank(), ".pb");
    {
      std::ofstream file(path + ".partial", std::ios::binary | std::ios::trunc);
      if (!table.SerializeToOstream(&file) || !file.flush()) {
        return absl::InternalError(absl::StrCat("cannot write ", path));
      }
    }
    fs::rename(path + ".partial", path, error);
    if (error)
      return absl::InternalError(absl::StrCat("cannot rename ", path, ": ", error.message()));
  }
  if (report.trace_chunk().empty() && !report.trace_last()) return absl::OkStatus();
  const std::string trace = Path(report.job_id(), "trace", report.rank(), ".json");
  if (report.trace_chunk_index() > 0) {
    // A trace larger than any window makes would only fill the disk.
    std::error_code size_error;
    const auto stored = fs::file_size(trace + ".partial", size_error);
    if (!size_error &&
        static_cast<int64_t>(stored + report.trace_chunk().size()) > max_trace_bytes_) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the trace of rank ", report.rank(), " of ", report.job_id(), " would pass ",
                       max_trace_bytes_, " bytes; the rest is dropped"));
    }
  }
  {
    // Chunk 0 starts a new trace; later chunks append in the order they arrive.
    std::ofstream file(
        trace + ".partial",
        std::ios::binary | (report.trace_chunk_index() == 0 ? std::ios::trunc : std::ios::app));
    file.write(report.trace_chunk().data(),
               static_cast<std::streamsize>(report.trace_chunk().size()));
    if (!file.flush()) return absl::InternalError(absl::StrCat("cannot write ", trace));
  }
  if (report.trace_last()) {
    fs::rename(trace + ".partial", trace, error);
    if (error)
      return absl::InternalError(absl::StrCat("cannot rename ", trace, ": ", error.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::ProfileReport> ProfileStore::KernelTable(const std::string& job_id,
                                                            int rank) const {
  std::ifstream file(Path(job_id, "profile", rank, ".pb"), std::ios::binary);
  if (!file) {
    return absl::NotFoundError(absl::StrCat("job ", job_id, " has no profile from rank ", rank));
  }
  v1::ProfileReport report;
  if (!report.ParseFromIstream(&file)) {
    return absl::DataLossError(absl::StrCat("the stored profile of ", job_id, " is damaged"));
  }
  return report;
}

absl::StatusOr<std::string> ProfileStore::TracePath(const std::string& job_id, int rank) const {
  const std::string path = Path(job_id, "trace", rank, ".json");
  std::error_code error;
  if (!fs::is_regular_file(path, error)) {
    return absl::NotFoundError(
        absl::StrCat("job ", job_id, " has no complete trace from rank ", rank, " yet"));
  }
  return path;
}

}  // namespace fsdpd::server
