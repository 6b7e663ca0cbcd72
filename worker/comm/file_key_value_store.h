// A KeyValueStore in a shared directory, for standalone runs (fsdpd-train) and the engine's
// tests. Every key is one file: Set writes a temp file and renames it over the key, so a reader
// sees either nothing or the whole value; Get polls until the file appears; Add serialises
// through flock(2) on a lock file, so it is atomic across processes on one host (and on shared
// filesystems whose flock is coherent).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/comm/key_value_store.h"

namespace fsdpd {

class FileKeyValueStore : public KeyValueStore {
 public:
  // Creates `directory` (and parents) if needed.
  static absl::StatusOr<std::unique_ptr<FileKeyValueStore>> Open(const std::string& directory);

  absl::Status Set(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::string> Get(const std::string& key,
                                  std::chrono::milliseconds timeout) override;
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta) override;

  const std::string& directory() const { return directory_; }

 private:
  explicit FileKeyValueStore(std::string directory) : directory_(std::move(directory)) {}
  // Keys may hold any bytes; file names hold only a safe, reversible encoding of them.
  absl::StatusOr<std::string> PathForKey(const std::string& key) const;

  std::string directory_;
};

}  // namespace fsdpd
