// A read-only memory mapping of a whole file: token files and checkpoints are read through the
// page cache without a private copy, so a multi-gigabyte file costs no extra memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace fsdpd {

class MappedFile {
 public:
  // `what` names the file's role in error messages, e.g. "data file" or "checkpoint file".
  static absl::StatusOr<std::unique_ptr<MappedFile>> Open(const std::string& path,
                                                          const std::string& what = "file");
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile(std::string path, const uint8_t* data, size_t size)
      : path_(std::move(path)), data_(data), size_(size) {}

  std::string path_;
  const uint8_t* data_ = nullptr;  // null for an empty file
  size_t size_ = 0;
};

}  // namespace fsdpd
