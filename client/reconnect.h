// Riding out a coordinator that goes away (a restart, an upgrade) in the verbs that follow a job
// over a stream: `fsdpctl watch` and `fsdpctl logs -f`. A stream that ends UNAVAILABLE (or
// CANCELLED, as calls in flight end while a coordinator shuts down) is opened again, after a
// backoff of 0.5 s doubling to 5 s, for up to `reconnect_for` from the moment the coordinator
// was lost; the user is told once when it is lost and once when it is back.
#pragma once

#include <chrono>

#include "client/client_context.h"
#include "grpcpp/support/status.h"

namespace fsdpd::client {

class Reconnector {
 public:
  Reconnector(const ClientOptions& options, std::chrono::seconds reconnect_for)
      : options_(options), reconnect_for_(reconnect_for) {}

  // The coordinator answered: after a loss, says it is back and resets the backoff.
  void Answered();

  // After a call or stream ended with `status` (not OK): waits the backoff and returns true when
  // the caller should try again; false when it should fail with `status` (neither UNAVAILABLE
  // nor CANCELLED, reconnect_for 0, or lost for longer than reconnect_for).
  bool WaitToRetry(const grpc::Status& status);

  bool lost() const { return lost_; }

 private:
  const ClientOptions& options_;
  const std::chrono::seconds reconnect_for_;
  bool lost_ = false;
  std::chrono::steady_clock::time_point lost_since_;
  std::chrono::milliseconds backoff_{500};
};

}  // namespace fsdpd::client
