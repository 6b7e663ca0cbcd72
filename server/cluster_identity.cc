#include "server/cluster_identity.h"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "spdlog/spdlog.h"

namespace fsdpd::server {
namespace {

constexpr char kClusterIdFile[] = "cluster-id";

// Writes `text` to `path` through a temp file, fsynced, then renamed.
absl::Status WriteDurably(const std::string& path, const std::string& text) {
  const std::string temp = path + ".tmp";
  const int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return absl::FailedPreconditionError(absl::StrCat("cannot create ", temp));
  const bool written =
      write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && fsync(fd) == 0;
  close(fd);
  if (!written || rename(temp.c_str(), path.c_str()) != 0) {
    return absl::FailedPreconditionError(absl::StrCat("cannot write ", path));
  }
  return absl::OkStatus();
}

std::string Advice(const std::string& state_dir) {
  return absl::StrCat(
      ": the job store was lost or truncated. Restore fsdpd.db from a backup, or move ", state_dir,
      " away to start a new cluster (docs/operations.md, \"When the store or its volume fails\")");
}

}  // namespace

std::string NewUuid() {
  static std::mutex mutex;
  static std::mt19937_64 random(std::random_device{}() ^
                                static_cast<uint64_t>(absl::ToUnixNanos(absl::Now())));
  uint64_t high, low;
  {
    std::lock_guard<std::mutex> lock(mutex);
    high = random();
    low = random();
  }
  high = (high & ~uint64_t{0xf000}) | uint64_t{0x4000};
  low = (low & ~(uint64_t{0xc} << 60)) | (uint64_t{0x8} << 60);
  return absl::StrFormat("%08x-%04x-%04x-%04x-%012x", high >> 32, (high >> 16) & 0xffff,
                         high & 0xffff, low >> 48, low & 0xffffffffffffULL);
}

absl::StatusOr<std::string> OpenClusterIdentity(const std::string& state_dir,
                                                const std::string& database_path) {
  namespace fs = std::filesystem;
  const std::string marker = (fs::path(state_dir) / kClusterIdFile).string();
  std::error_code error;
  const bool database_exists = fs::exists(database_path, error);
  const uintmax_t database_size = database_exists ? fs::file_size(database_path, error) : 0;
  if (fs::exists(marker, error)) {
    std::ifstream file(marker);
    std::stringstream content;
    content << file.rdbuf();
    const std::string id(absl::StripAsciiWhitespace(content.str()));
    if (id.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(marker, " is empty"));
    }
    if (!database_exists || database_size == 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          database_path, database_exists ? " is empty (zero length)" : " is missing",
          " but the state folder belongs to cluster ", id, " (", marker, ")", Advice(state_dir)));
    }
    return id;
  }
  if (database_exists && database_size == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(database_path, " is empty (zero length)", Advice(state_dir)));
  }
  const std::string id = NewUuid();
  if (absl::Status status = WriteDurably(marker, id + "\n"); !status.ok()) return status;
  spdlog::info("state folder {}: cluster id {}{}", state_dir, id,
               database_exists ? " (given to an existing store)" : " (new cluster)");
  return id;
}

}  // namespace fsdpd::server
