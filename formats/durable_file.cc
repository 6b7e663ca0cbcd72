#include "formats/durable_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace fsdpd {
namespace {

// Manifests are a few hundred bytes per rank; anything this large is not one.
constexpr size_t kMaxSmallFileBytes = size_t{64} << 20;

absl::Status ErrnoStatus(int error_number, const std::string& what) {
  const std::string message = absl::StrCat(what, ": ", std::strerror(error_number));
  switch (error_number) {
    case ENOENT:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
    case EROFS:
      return absl::PermissionDeniedError(message);
    case ENOSPC:
    case EDQUOT:
      return absl::ResourceExhaustedError(message);
    default:
      return absl::InternalError(message);
  }
}

std::string ParentDirectory(const std::string& path) {
  std::string parent = std::filesystem::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

}  // namespace

DurableFileWriter::~DurableFileWriter() { Abandon(); }

std::string DurableFileWriter::TempPathFor(const std::string& path) {
  return absl::StrCat(path, ".tmp-", static_cast<long>(getpid()));
}

void DurableFileWriter::Abandon() {
  if (fd_ >= 0) {
    close(fd_);
    fd_ = -1;
  }
  if (!temp_path_.empty()) {
    unlink(temp_path_.c_str());
    temp_path_.clear();
  }
}

absl::Status DurableFileWriter::Open(const std::string& path) {
  Abandon();
  if (path.empty()) return absl::InvalidArgumentError("cannot write a file with an empty path");
  path_ = path;
  temp_path_ = TempPathFor(path);
  bytes_written_ = 0;
  fd_ = open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    const int error_number = errno;
    temp_path_.clear();
    return ErrnoStatus(error_number, absl::StrCat("cannot create '", path, "' (temp file)"));
  }
  return absl::OkStatus();
}

absl::Status DurableFileWriter::Append(const void* data, size_t size) {
  if (fd_ < 0) return absl::FailedPreconditionError("DurableFileWriter::Append before Open");
  const char* bytes = static_cast<const char*>(data);
  while (size > 0) {
    // Linux writes at most ~2 GiB per call; larger buffers go in pieces.
    const size_t chunk = std::min<size_t>(size, size_t{1} << 30);
    const ssize_t written = write(fd_, bytes, chunk);
    if (written < 0) {
      if (errno == EINTR) continue;
      const int error_number = errno;
      Abandon();
      return ErrnoStatus(error_number, absl::StrCat("cannot write '", path_, "'"));
    }
    bytes += written;
    size -= static_cast<size_t>(written);
    bytes_written_ += static_cast<uint64_t>(written);
  }
  return absl::OkStatus();
}

absl::Status DurableFileWriter::Commit() {
  if (fd_ < 0) return absl::FailedPreconditionError("DurableFileWriter::Commit before Open");
  if (fsync(fd_) != 0) {
    const int error_number = errno;
    Abandon();
    return ErrnoStatus(error_number, absl::StrCat("cannot fsync '", path_, "'"));
  }
  if (close(fd_) != 0) {
    fd_ = -1;
    const int error_number = errno;
    Abandon();
    return ErrnoStatus(error_number, absl::StrCat("cannot close '", path_, "'"));
  }
  fd_ = -1;
  if (rename(temp_path_.c_str(), path_.c_str()) != 0) {
    const int error_number = errno;
    Abandon();
    return ErrnoStatus(error_number, absl::StrCat("cannot rename into '", path_, "'"));
  }
  temp_path_.clear();
  return SyncDirectory(ParentDirectory(path_));
}

absl::Status WriteFileDurably(const std::string& path, std::string_view contents) {
  DurableFileWriter writer;
  if (auto status = writer.Open(path); !status.ok()) return status;
  if (auto status = writer.Append(contents); !status.ok()) return status;
  return writer.Commit();
}

absl::Status SyncDirectory(const std::string& directory) {
  const int fd = open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    return ErrnoStatus(errno, absl::StrCat("cannot open directory '", directory, "'"));
  }
  const int result = fsync(fd);
  const int error_number = errno;
  close(fd);
  if (result != 0) {
    return ErrnoStatus(error_number, absl::StrCat("cannot fsync directory '", directory, "'"));
  }
  return absl::OkStatus();
}

absl::Status ReadSmallFile(const std::string& path, std::string* contents) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("cannot open '", path, "'"));
  contents->clear();
  char buffer[1 << 16];
  while (true) {
    const ssize_t count = read(fd, buffer, sizeof(buffer));
    if (count < 0) {
      if (errno == EINTR) continue;
      const int error_number = errno;
      close(fd);
      return ErrnoStatus(error_number, absl::StrCat("cannot read '", path, "'"));
    }
    if (count == 0) break;
    contents->append(buffer, static_cast<size_t>(count));
    if (contents->size() > kMaxSmallFileBytes) {
      close(fd);
      return absl::FailedPreconditionError(absl::StrCat(
          "'", path, "' is larger than ", kMaxSmallFileBytes, " bytes; not a manifest or hint"));
    }
  }
  close(fd);
  return absl::OkStatus();
}

}  // namespace fsdpd
