#include "server/cluster_identity.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>
#include <random>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "spdlog/spdlog.h"

namespace fsdpd::server {
namespace {

constexpr char kClusterIdFile[] = "cluster-id";

// Writes `text` to `path` through a fresh temp file, fsynced, then renamed, and the rename
// made durable by syncing the folder.
absl::Status WriteDurably(const std::string& path, const std::string& text) {
  const std::string temp = path + ".tmp";
  unlink(temp.c_str());  // whatever was left there (a file, a FIFO): O_EXCL makes a new one
  const int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create ", temp, ": ", std::strerror(errno)));
  }
  const bool written =
      write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && fsync(fd) == 0;
  close(fd);
  if (!written || rename(temp.c_str(), path.c_str()) != 0) {
    unlink(temp.c_str());
    return absl::FailedPreconditionError(absl::StrCat("cannot write ", path));
  }
  const int folder =
      open(std::filesystem::path(path).parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (folder >= 0) {
    fsync(folder);
    close(folder);
  }
  return absl::OkStatus();
}

// The id stored in `marker`, nullopt when there is no such file. Refuses, naming the file, one
// that is not a regular file (opened without blocking: a FIFO there must not hang the start) or
// does not hold exactly one cluster id.
absl::StatusOr<std::optional<std::string>> ReadMarker(const std::string& marker) {
  const int fd = open(marker.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::nullopt;
    return absl::FailedPreconditionError(
        absl::StrCat("cannot read ", marker, ": ", std::strerror(errno)));
  }
  struct stat info {};
  std::string content;
  const bool regular = fstat(fd, &info) == 0 && S_ISREG(info.st_mode);
  if (regular) {
    char buffer[4096];
    const ssize_t size = read(fd, buffer, sizeof(buffer));
    if (size > 0) content.assign(buffer, static_cast<size_t>(size));
  }
  close(fd);
  const std::string id(absl::StripAsciiWhitespace(content));
  if (!regular || !IsClusterId(id)) {
    return absl::FailedPreconditionError(absl::StrCat(
        marker,
        !regular ? " is not a regular file"
                 : (content.empty()
                        ? " is empty"
                        : absl::StrCat(" does not hold a cluster id (", info.st_size, " bytes)")),
        ": it must hold one UUID on one line, such as 1b4e28ba-2fa1-4d3b-a3f5-ef19b1f2c2a1, as "
        "fsdpd wrote it when the state folder was new. Restore it from the backup of this state "
        "folder, or, if fsdpd.db is intact, remove it and the store gets a new id "
        "(docs/operations.md, \"When the store or its volume fails\")"));
  }
  return std::optional<std::string>(id);
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

bool IsClusterId(absl::string_view text) {
  if (text.size() != 36) return false;
  for (size_t i = 0; i < text.size(); ++i) {
    const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash ? text[i] != '-' : !absl::ascii_isxdigit(static_cast<unsigned char>(text[i]))) {
      return false;
    }
  }
  return true;
}

absl::StatusOr<ClusterIdentity> ReadClusterIdentity(const std::string& state_dir,
                                                    const std::string& database_path) {
  namespace fs = std::filesystem;
  const std::string marker = (fs::path(state_dir) / kClusterIdFile).string();
  std::error_code error;
  ClusterIdentity identity;
  identity.database_existed = fs::exists(database_path, error);
  const uintmax_t database_size =
      identity.database_existed ? fs::file_size(database_path, error) : 0;
  absl::StatusOr<std::optional<std::string>> stored = ReadMarker(marker);
  if (!stored.ok()) return stored.status();
  if (stored->has_value()) {
    identity.id = **stored;
    if (!identity.database_existed || database_size == 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          database_path, identity.database_existed ? " is empty (zero length)" : " is missing",
          " but the state folder belongs to cluster ", identity.id, " (", marker, ")",
          Advice(state_dir)));
    }
    return identity;
  }
  if (identity.database_existed && database_size == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(database_path, " is empty (zero length)", Advice(state_dir)));
  }
  identity.id = NewUuid();
  identity.is_new = true;
  return identity;
}

absl::Status WriteClusterIdentity(const std::string& state_dir, const ClusterIdentity& identity) {
  if (!identity.is_new) return absl::OkStatus();
  const std::string marker = (std::filesystem::path(state_dir) / kClusterIdFile).string();
  if (absl::Status status = WriteDurably(marker, identity.id + "\n"); !status.ok()) return status;
  spdlog::info("state folder {}: cluster id {}{}", state_dir, identity.id,
               identity.database_existed ? " (given to an existing store)" : " (new cluster)");
  return absl::OkStatus();
}

absl::StatusOr<std::string> OpenClusterIdentity(const std::string& state_dir,
                                                const std::string& database_path) {
  absl::StatusOr<ClusterIdentity> identity = ReadClusterIdentity(state_dir, database_path);
  if (!identity.ok()) return identity.status();
  if (absl::Status status = WriteClusterIdentity(state_dir, *identity); !status.ok()) {
    return status;
  }
  return identity->id;
}

}  // namespace fsdpd::server
