#include "server/peer_rate_limiter.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace fsdpd::server {

std::string PeerRateLimiter::PeerHost(const std::string& peer) {
  const size_t colon = peer.rfind(':');
  const size_t scheme = peer.find(':');
  if (colon == std::string::npos || colon == scheme) return peer;
  return peer.substr(0, colon);
}

size_t PeerRateLimiter::TrackedPeers() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return buckets_.size();
}

void PeerRateLimiter::PruneLocked(Clock::time_point now) {
  if (now - last_prune_ < std::chrono::seconds(10)) return;
  last_prune_ = now;
  for (auto it = buckets_.begin(); it != buckets_.end();) {
    const double elapsed = std::chrono::duration<double>(now - it->second.updated).count();
    const bool full = it->second.tokens + elapsed * rate_ >= burst_;
    it = full ? buckets_.erase(it) : std::next(it);
  }
}

absl::Status PeerRateLimiter::Take(const std::string& peer, Clock::time_point now) {
  const std::string host = PeerHost(peer);
  std::lock_guard<std::mutex> lock(mutex_);
  PruneLocked(now);
  auto [it, inserted] = buckets_.try_emplace(host, Bucket{burst_, now});
  Bucket& bucket = it->second;
  if (!inserted) {
    const double elapsed = std::chrono::duration<double>(now - bucket.updated).count();
    bucket.tokens = std::min(burst_, bucket.tokens + std::max(0.0, elapsed) * rate_);
    bucket.updated = now;
  }
  if (bucket.tokens < 1) {
    return absl::ResourceExhaustedError(
        absl::StrCat("too many registrations from ", host, ": at most ", rate_,
                     " a second (coordinator --register-rate); retry later"));
  }
  bucket.tokens -= 1;
  return absl::OkStatus();
}

}  // namespace fsdpd::server
