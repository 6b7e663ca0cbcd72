#include "worker/device/oom_evidence.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <system_error>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "spdlog/spdlog.h"

namespace fsdpd {
namespace {

std::string Sanitized(const std::string& text) {
  std::string out = text;
  for (char& c : out) {
    const bool plain = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                       c == '.' || c == '_' || c == '-';
    if (!plain) c = '_';
  }
  return out;
}

}  // namespace

std::string OomEvidenceFile(const std::string& checkpoint_root, const std::string& hostname,
                            const std::string& device) {
  return absl::StrCat(checkpoint_root, "/.fsdpd-worker/", Sanitized(hostname), "-",
                      Sanitized(device), ".attempt");
}

OomEvidence::OomEvidence(std::string file, std::function<CgroupMemory()> read_cgroup)
    : file_(std::move(file)), read_cgroup_(std::move(read_cgroup)) {}

std::optional<OomKillReport> OomEvidence::PreviousKill() const {
  std::ifstream in(file_);
  if (!in) return std::nullopt;
  // One `key value` a line; the values hold no newline.
  std::map<std::string, std::string> fields;
  std::string line;
  while (std::getline(in, line)) {
    const size_t space = line.find(' ');
    if (space != std::string::npos) fields[line.substr(0, space)] = line.substr(space + 1);
  }
  OomKillReport report;
  report.attempt.job_id = fields["job_id"];
  report.attempt.job_uid = fields["job_uid"];
  report.cgroup = fields["cgroup"];
  if (report.attempt.job_id.empty() ||
      !absl::SimpleAtoi(fields["attempt"], &report.attempt.attempt) ||
      !absl::SimpleAtoi(fields["rank"], &report.attempt.rank) ||
      !absl::SimpleAtoi(fields["oom_kills"], &report.oom_kills_before)) {
    return std::nullopt;  // written by no finished Started, or by something else
  }
  const CgroupMemory now = read_cgroup_();
  if (!now.oom_kills.has_value() || now.directory != report.cgroup) return std::nullopt;
  report.oom_kills_after = *now.oom_kills;
  if (report.oom_kills_after <= report.oom_kills_before) return std::nullopt;
  return report;
}

void OomEvidence::Started(const AttemptOnRecord& attempt) {
  const CgroupMemory cgroup = read_cgroup_();
  if (!cgroup.oom_kills.has_value()) {
    Clear();  // nothing to compare against later
    return;
  }
  std::error_code error;
  std::filesystem::create_directories(std::filesystem::path(file_).parent_path(), error);
  const std::string temporary = file_ + ".tmp";
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << "job_id " << attempt.job_id << "\n"
        << "job_uid " << attempt.job_uid << "\n"
        << "attempt " << attempt.attempt << "\n"
        << "rank " << attempt.rank << "\n"
        << "cgroup " << cgroup.directory << "\n"
        << "oom_kills " << *cgroup.oom_kills << "\n";
    out.flush();
    if (!out) {
      spdlog::warn(
          "cannot record the running attempt in {}: an OOM kill during it will not be "
          "reported as one",
          temporary);
      return;
    }
  }
  std::filesystem::rename(temporary, file_, error);
  if (error) {
    spdlog::warn("cannot record the running attempt in {}: {}", file_, error.message());
  }
}

void OomEvidence::Clear() {
  std::error_code error;
  std::filesystem::remove(file_, error);
}

}  // namespace fsdpd
