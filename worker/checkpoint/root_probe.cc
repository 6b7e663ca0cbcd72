#include "worker/checkpoint/root_probe.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace fsdpd {
namespace {

absl::Status NotWritable(const std::string& root, const std::string& why) {
  return absl::UnavailableError(
      absl::StrCat("the checkpoint root '", root, "' is not writable: ", why));
}

constexpr size_t kIdentityLength = 32;  // hex digits of 128 random bits

absl::Status NoIdentity(const std::string& root, const std::string& why) {
  return absl::UnavailableError(absl::StrCat("the checkpoint root '", root, "' has no identity (",
                                             kRootIdentityFile, "): ", why));
}

// The marker's content, or NOT_FOUND when there is none yet.
absl::StatusOr<std::string> ReadIdentity(const std::string& root, const std::string& marker) {
  const int fd = open(marker.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    if (errno == ENOENT) return absl::NotFoundError(marker);
    return NoIdentity(root, std::strerror(errno));
  }
  char buffer[kIdentityLength + 2];
  const ssize_t got = read(fd, buffer, sizeof(buffer));
  const int error_number = got < 0 ? errno : 0;
  close(fd);
  if (got < 0) return NoIdentity(root, std::strerror(error_number));
  const std::string text(absl::StripTrailingAsciiWhitespace(std::string(buffer, got)));
  const bool hex =
      text.size() == kIdentityLength &&
      std::all_of(text.begin(), text.end(), [](char c) { return absl::ascii_isxdigit(c); });
  if (!hex) {
    return absl::DataLossError(absl::StrCat(
        marker,
        " does not hold a checkpoint root identity (32 hex digits); remove it and every "
        "worker on this root makes a new one"));
  }
  return text;
}

std::string NewIdentity() {
  std::random_device device;
  std::string identity;
  for (int word = 0; word < 4; ++word) absl::StrAppendFormat(&identity, "%08x", device());
  return identity;
}

}  // namespace

absl::Status ProbeCheckpointRoot(const std::string& root) {
  std::error_code error;
  std::filesystem::create_directories(root, error);
  if (error) return NotWritable(root, error.message());
  // One name per process and probe, so workers sharing a root never race on it.
  static std::atomic<int> probes{0};
  const std::string probe =
      absl::StrCat(root, "/.fsdpd-probe-", static_cast<long>(getpid()), "-", probes++);
  const int fd = open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return NotWritable(root, std::strerror(errno));
  const char byte = 0;
  int error_number = 0;
  if (write(fd, &byte, 1) != 1) error_number = errno;
  // A network file system may report a failed write only when the file is closed.
  if (close(fd) != 0 && error_number == 0) error_number = errno;
  if (unlink(probe.c_str()) != 0 && error_number == 0) error_number = errno;
  if (error_number != 0) return NotWritable(root, std::strerror(error_number));
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadOrCreateRootIdentity(const std::string& root) {
  const std::string marker = absl::StrCat(root, "/", kRootIdentityFile);
  absl::StatusOr<std::string> found = ReadIdentity(root, marker);
  if (!absl::IsNotFound(found.status())) return found;
  // Written whole under a name of its own, then linked into place: link fails with EEXIST when
  // another worker on this shared root was first, and then its identity is the root's.
  static std::atomic<int> attempts{0};
  const std::string temporary =
      absl::StrCat(marker, ".tmp-", static_cast<long>(getpid()), "-", attempts++);
  const int fd = open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return NoIdentity(root, std::strerror(errno));
  const std::string text = NewIdentity() + "\n";
  int error_number = 0;
  if (write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
    error_number = errno != 0 ? errno : EIO;
  }
  if (error_number == 0 && fsync(fd) != 0) error_number = errno;
  if (close(fd) != 0 && error_number == 0) error_number = errno;
  if (error_number == 0 && link(temporary.c_str(), marker.c_str()) != 0 && errno != EEXIST) {
    error_number = errno;
  }
  unlink(temporary.c_str());
  if (error_number != 0) return NoIdentity(root, std::strerror(error_number));
  return ReadIdentity(root, marker);
}

absl::Status CheckpointRootNotShared(absl::string_view what) {
  return absl::FailedPreconditionError(absl::StrCat(
      what,
      ". The job's ranks do not share one checkpoint root: give every worker that may run it the "
      "same --checkpoint-root on a file system all their hosts mount (NFS, a shared volume). "
      "No retry can fix this"));
}

}  // namespace fsdpd
