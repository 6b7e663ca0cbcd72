// Lets Gloo's rendezvous (gloo::rendezvous::Context::connectFullMesh) run over our
// KeyValueStore, so ranks meet through the coordinator's store or a shared directory alike.
// Gloo's Store interface reports failures by throwing; this adapter throws gloo::IoException
// with our store's message, and the communicator turns it back into a Status.
//
// Gloo's full-mesh connect waits for each peer's key and then gets it. A wait here already reads
// the value (our store's Get waits for the key), so the adapter keeps what a wait read and hands
// it to the get that follows: one call to the coordinator per peer instead of two, which is most
// of a large gang's rendezvous (bench/RESULTS.md, "Gang scheduling and rendezvous"). Keys are
// written once per attempt, so the kept value is the stored one. Used by one thread at a time,
// as Gloo's rendezvous is.
#pragma once

#include <chrono>
#include <map>
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
  std::map<std::string, std::string> waited_;  // read by a wait, not yet taken by a get
};

}  // namespace fsdpd
