// The key-value store that ranks rendezvous through. Gloo (and, on GPUs, the NCCL unique id
// exchange) sit on top of this interface. Two implementations: the coordinator's rendezvous
// service (coordinator_key_value_store.h) and a shared directory for standalone runs and the
// engine's own tests (file_key_value_store.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/key_part.h"

namespace fsdpd {

class KeyValueStore {
 public:
  virtual ~KeyValueStore() = default;
  virtual absl::Status Set(const std::string& key, const std::string& value) = 0;
  // Waits until the key exists; DEADLINE_EXCEEDED after `timeout`.
  virtual absl::StatusOr<std::string> Get(const std::string& key,
                                          std::chrono::milliseconds timeout) = 0;
  // Reads every key, waiting until all exist, and returns their values (or parts) in order;
  // DEADLINE_EXCEEDED after `timeout`, FAILED_PRECONDITION for a value that does not split into
  // the parts asked. This default reads one key at a time; the coordinator's store reads them
  // all in one call.
  virtual absl::StatusOr<std::vector<std::string>> GetMany(const std::vector<KeyPart>& keys,
                                                           std::chrono::milliseconds timeout);
  // Atomically adds `delta` to a counter that starts at 0; returns the new value.
  virtual absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta) = 0;
};

}  // namespace fsdpd
