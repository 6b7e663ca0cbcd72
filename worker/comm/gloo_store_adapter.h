// Lets Gloo's rendezvous (gloo::rendezvous::Context::connectFullMesh) run over our
// KeyValueStore, so ranks meet through the coordinator's store or a shared directory alike.
// Gloo's Store interface reports failures by throwing; this adapter throws gloo::IoException
// with our store's message, and the communicator turns it back into a Status.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "gloo/rendezvous/store.h"
#include "worker/comm/key_value_store.h"

namespace fsdpd {

class GlooStoreAdapter : public gloo::rendezvous::Store {
 public:
  // Keys are prefixed with `prefix` so that Gloo's bare keys ("0", "1", ...) cannot collide
  // with other users of the same store.
  GlooStoreAdapter(KeyValueStore* store, std::string prefix, std::chrono::milliseconds timeout)
      : store_(store), prefix_(std::move(prefix)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  KeyValueStore* store_;
  std::string prefix_;
  std::chrono::milliseconds timeout_;
};

}  // namespace fsdpd
