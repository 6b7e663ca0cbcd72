// A token bucket per peer address, bounding how often one host may call an RPC (Register):
// a flood of fake workers from one address is refused with RESOURCE_EXHAUSTED instead of
// growing the registry. Peers are keyed by address without the port, so reconnecting from new
// ports does not reset the bucket.
#pragma once

#include <chrono>
#include <cstddef>
#include <map>
#include <mutex>
#include <string>

#include "absl/status/status.h"

namespace fsdpd::server {

class PeerRateLimiter {
 public:
  using Clock = std::chrono::steady_clock;

  // `rate` calls per second on average, bursts of up to `burst`.
  PeerRateLimiter(double rate, double burst) : rate_(rate), burst_(burst) {}

  // OK and one call taken from the peer's bucket, or RESOURCE_EXHAUSTED naming the limit.
  absl::Status Take(const std::string& peer, Clock::time_point now = Clock::now());

  // "ipv4:10.0.0.5:41234" -> "ipv4:10.0.0.5"; "ipv6:[::1]:41234" -> "ipv6:[::1]".
  static std::string PeerHost(const std::string& peer);

  size_t TrackedPeers() const;

 private:
  struct Bucket {
    double tokens = 0;
    Clock::time_point updated;
  };
  // Forgets peers whose buckets have refilled, so the map stays bounded by the active peers.
  void PruneLocked(Clock::time_point now);

  const double rate_;
  const double burst_;
  mutable std::mutex mutex_;
  std::map<std::string, Bucket> buckets_;
  Clock::time_point last_prune_;
};

}  // namespace fsdpd::server
