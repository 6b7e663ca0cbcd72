#include "worker/checkpoint/root_probe.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"

namespace fsdpd {
namespace {

absl::Status NotWritable(const std::string& root, const std::string& why) {
  return absl::UnavailableError(
      absl::StrCat("the checkpoint root '", root, "' is not writable: ", why));
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

}  // namespace fsdpd
