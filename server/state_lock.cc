#include "server/state_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <map>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace fsdpd::server {
namespace {

std::string HostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "?";
  return name;
}

// What the holder wrote ("pid 123\nhost h\nlisten a:1\n..."), at most a few KiB, with anything
// unprintable replaced: the file is read from a folder others may write to.
std::map<std::string, std::string> ReadHolder(int fd) {
  char buffer[4096];
  const ssize_t size = pread(fd, buffer, sizeof(buffer), 0);
  std::string text(buffer, size > 0 ? static_cast<size_t>(size) : 0);
  for (char& c : text) {
    if (c != '\n' &&
        (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f)) {
      c = '?';
    }
  }
  std::map<std::string, std::string> fields;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    const size_t space = line.find(' ');
    if (space == absl::string_view::npos) continue;
    fields[std::string(line.substr(0, space))] = std::string(line.substr(space + 1));
  }
  return fields;
}

std::string DescribeHolder(const std::map<std::string, std::string>& holder) {
  auto field = [&](const std::string& key) {
    auto found = holder.find(key);
    return found == holder.end() ? std::string() : found->second;
  };
  if (field("pid").empty()) return "pid unknown: it is still starting";
  std::string text = absl::StrCat("pid ", field("pid"));
  if (!field("host").empty()) absl::StrAppend(&text, " on host ", field("host"));
  absl::StrAppend(&text, ", listening on ", field("listen").empty() ? "?" : field("listen"));
  if (!field("metrics").empty()) absl::StrAppend(&text, ", metrics on ", field("metrics"));
  if (!field("health").empty()) absl::StrAppend(&text, ", health on ", field("health"));
  return text;
}

}  // namespace

absl::StatusOr<std::unique_ptr<StateLock>> StateLock::Acquire(const std::string& state_dir,
                                                              const std::string& listen) {
  const std::string path = absl::StrCat(state_dir, "/", kFileName);
  // The file may be removed by the previous holder between our open and our lock; the lock is
  // then on a file nobody else will open, so take the one the path names now.
  const auto stopping_deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(kStoppingWaitSeconds);
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) {
      return absl::FailedPreconditionError(absl::StrCat("state-dir: cannot create the lock file ",
                                                        path, ": ", std::strerror(errno)));
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int lock_error = errno;
      const std::map<std::string, std::string> holder = ReadHolder(fd);
      close(fd);
      if (lock_error == EWOULDBLOCK && holder.count("stopping") > 0 &&
          std::chrono::steady_clock::now() < stopping_deadline) {
        // The holder is shutting down: wait for it rather than refuse (not counted as an
        // attempt: the loop ends at the deadline).
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        --attempt;
        continue;
      }
      if (lock_error == EWOULDBLOCK) {
        return absl::FailedPreconditionError(absl::StrCat(
            "state-dir ", state_dir, " is in use by another fsdpd (", DescribeHolder(holder),
            "; it holds the lock ", path,
            holder.count("stopping") > 0
                ? absl::StrCat("; it has been stopping for over ", kStoppingWaitSeconds, " s")
                : "",
            "). One state folder serves one coordinator: stop that one first, or give this one "
            "another --state-dir"));
      }
      return absl::FailedPreconditionError(
          absl::StrCat("state-dir: cannot lock ", path, ": ", std::strerror(lock_error)));
    }
    struct stat held {};
    struct stat named {};
    if (fstat(fd, &held) == 0 && stat(path.c_str(), &named) == 0 && held.st_dev == named.st_dev &&
        held.st_ino == named.st_ino) {
      std::unique_ptr<StateLock> lock(new StateLock(path, fd));
      if (absl::Status status = lock->RecordAddresses(listen, "", ""); !status.ok()) return status;
      return lock;
    }
    close(fd);
  }
  return absl::FailedPreconditionError(
      absl::StrCat("state-dir: cannot lock ", path, ": it keeps being replaced"));
}

StateLock::~StateLock() {
  if (fd_ < 0) return;
  unlink(path_.c_str());
  close(fd_);
}

std::string StateLock::Describe(const std::string& listen, const std::string& metrics,
                                const std::string& health) const {
  return absl::StrCat("pid ", getpid(), "\nhost ", HostName(), "\nlisten ", listen, "\nmetrics ",
                      metrics, "\nhealth ", health, "\n");
}

absl::Status StateLock::RecordAddresses(const std::string& listen, const std::string& metrics,
                                        const std::string& health) {
  listen_ = listen;
  metrics_ = metrics;
  health_ = health;
  return Write(Describe(listen, metrics, health));
}

void StateLock::MarkStopping() {
  (void)Write(absl::StrCat(Describe(listen_, metrics_, health_), "stopping 1\n"));
}

absl::Status StateLock::Write(const std::string& text) {
  // Written over the old text, then cut to length: a reader never finds the file empty.
  if (pwrite(fd_, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size()) ||
      ftruncate(fd_, static_cast<off_t>(text.size())) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("state-dir: cannot write the lock file ", path_, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace fsdpd::server
