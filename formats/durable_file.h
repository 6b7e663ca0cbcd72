// Crash-safe file writes: a reader sees either the old file or the complete new one, never a
// torn write. The bytes go to "<path>.tmp-<pid>" in the same directory, are fsynced, renamed
// over <path>, and the directory is fsynced so the rename itself survives a power cut.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace fsdpd {

class DurableFileWriter {
 public:
  DurableFileWriter() = default;
  DurableFileWriter(const DurableFileWriter&) = delete;
  DurableFileWriter& operator=(const DurableFileWriter&) = delete;
  // Removes the temp file unless Commit succeeded: a failed write leaves <path> untouched.
  ~DurableFileWriter();

  absl::Status Open(const std::string& path);
  absl::Status Append(const void* data, size_t size);
  absl::Status Append(std::string_view bytes) { return Append(bytes.data(), bytes.size()); }
  // fsync, rename over the final path, fsync the directory.
  absl::Status Commit();

  uint64_t bytes_written() const { return bytes_written_; }
  // The temp file's name for `path` in this process (tests use it to inject write faults).
  static std::string TempPathFor(const std::string& path);

 private:
  void Abandon();

  std::string path_;
  std::string temp_path_;
  int fd_ = -1;
  uint64_t bytes_written_ = 0;
};

// Writes a whole file durably (see DurableFileWriter).
absl::Status WriteFileDurably(const std::string& path, std::string_view contents);

// fsync on a directory, so that renames and unlinks in it are durable.
absl::Status SyncDirectory(const std::string& directory);

// Reads a small file whole (manifests, hints). Errors name the path.
absl::Status ReadSmallFile(const std::string& path, std::string* contents);

}  // namespace fsdpd
