#include "formats/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace fsdpd {

absl::StatusOr<std::unique_ptr<MappedFile>> MappedFile::Open(const std::string& path,
                                                             const std::string& what) {
  if (path.empty()) return absl::InvalidArgumentError(absl::StrCat(what, ": no path given"));
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer; it is refused
  // below as not a regular file. A mapping does not use the flag.
  const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int error_number = errno;
    if (error_number == ENOENT) {
      return absl::NotFoundError(absl::StrCat(what, " '", path, "' does not exist"));
    }
    const std::string message =
        absl::StrCat("cannot open ", what, " '", path, "': ", std::strerror(error_number));
    if (error_number == EACCES || error_number == EPERM) {
      return absl::PermissionDeniedError(message);
    }
    return absl::FailedPreconditionError(message);
  }
  struct stat info {};
  if (fstat(fd, &info) != 0) {
    const int error_number = errno;
    close(fd);
    return absl::InternalError(
        absl::StrCat("cannot stat ", what, " '", path, "': ", std::strerror(error_number)));
  }
  if (!S_ISREG(info.st_mode)) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(what, " '", path, "' is not a regular file"));
  }
  const size_t size = static_cast<size_t>(info.st_size);
  const uint8_t* data = nullptr;
  if (size > 0) {
    void* mapping = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (mapping == MAP_FAILED) {
      const int error_number = errno;
      close(fd);
      return absl::InternalError(
          absl::StrCat("cannot map ", what, " '", path, "': ", std::strerror(error_number)));
    }
    data = static_cast<const uint8_t*>(mapping);
  }
  // The mapping keeps the file's pages reachable; the descriptor is no longer needed.
  close(fd);
  return std::unique_ptr<MappedFile>(new MappedFile(path, data, size));
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace fsdpd
