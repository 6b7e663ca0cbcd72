#include "worker/comm/file_key_value_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace fsdpd {
namespace {

absl::Status ErrnoError(const std::string& what, const std::string& path) {
  return absl::InternalError(absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(path);
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

absl::Status WriteFileAtomically(const std::string& path, const std::string& value) {
  static std::atomic<uint64_t> counter{0};
  const std::string temp =
      absl::StrCat(path, ".tmp.", getpid(), ".", counter.fetch_add(1, std::memory_order_relaxed));
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("cannot create", temp);
  size_t written = 0;
  while (written < value.size()) {
    ssize_t n = ::write(fd, value.data() + written, value.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      absl::Status status = ErrnoError("cannot write", temp);
      ::close(fd);
      ::unlink(temp.c_str());
      return status;
    }
    written += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) {
    absl::Status status = ErrnoError("cannot close", temp);
    ::unlink(temp.c_str());
    return status;
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    absl::Status status = ErrnoError("cannot rename into", path);
    ::unlink(temp.c_str());
    return status;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<FileKeyValueStore>> FileKeyValueStore::Open(
    const std::string& directory) {
  if (directory.empty()) {
    return absl::InvalidArgumentError("key-value store directory is empty");
  }
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  if (error || !std::filesystem::is_directory(directory)) {
    return absl::InvalidArgumentError(absl::StrCat("key-value store directory ", directory,
                                                   " cannot be created: ", error.message()));
  }
  return std::unique_ptr<FileKeyValueStore>(new FileKeyValueStore(directory));
}

absl::StatusOr<std::string> FileKeyValueStore::PathForKey(const std::string& key) const {
  if (key.empty()) return absl::InvalidArgumentError("key-value store key is empty");
  static const char kHex[] = "0123456789abcdef";
  std::string name = "k_";
  for (unsigned char c : key) {
    if (std::isalnum(c) || c == '-' || c == '_') {
      name.push_back(static_cast<char>(c));
    } else {
      name.push_back('.');
      name.push_back(kHex[c >> 4]);
      name.push_back(kHex[c & 15]);
    }
  }
  if (name.size() > 240) {
    return absl::InvalidArgumentError(
        absl::StrCat("key-value store key too long (", key.size(), " bytes)"));
  }
  return absl::StrCat(directory_, "/", name);
}

absl::Status FileKeyValueStore::Set(const std::string& key, const std::string& value) {
  absl::StatusOr<std::string> path = PathForKey(key);
  if (!path.ok()) return path.status();
  return WriteFileAtomically(*path, value);
}

absl::StatusOr<std::string> FileKeyValueStore::Get(const std::string& key,
                                                   std::chrono::milliseconds timeout) {
  absl::StatusOr<std::string> path = PathForKey(key);
  if (!path.ok()) return path.status();
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::milliseconds(1);
  while (true) {
    absl::StatusOr<std::string> value = ReadWholeFile(*path);
    if (value.ok()) return value;
    if (std::chrono::steady_clock::now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "key '", key, "' did not appear in ", directory_, " within ", timeout.count(), " ms"));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(20));
  }
}

absl::StatusOr<int64_t> FileKeyValueStore::Add(const std::string& key, int64_t delta) {
  absl::StatusOr<std::string> path = PathForKey(key);
  if (!path.ok()) return path.status();
  const std::string lock_path = *path + ".lock";
  int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("cannot open lock file", lock_path);
  while (::flock(fd, LOCK_EX) != 0) {
    if (errno != EINTR) {
      absl::Status status = ErrnoError("cannot lock", lock_path);
      ::close(fd);
      return status;
    }
  }
  int64_t current = 0;
  absl::StatusOr<std::string> existing = ReadWholeFile(*path);
  absl::Status status;
  if (existing.ok() && !absl::SimpleAtoi(*existing, &current)) {
    status = absl::FailedPreconditionError(
        absl::StrCat("key '", key, "' holds '", *existing, "', not a counter"));
  }
  if (status.ok()) status = WriteFileAtomically(*path, absl::StrCat(current + delta));
  ::flock(fd, LOCK_UN);
  ::close(fd);
  if (!status.ok()) return status;
  return current + delta;
}

}  // namespace fsdpd
