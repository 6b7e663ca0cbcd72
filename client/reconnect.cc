#include "client/reconnect.h"

#include <algorithm>
#include <iostream>
#include <thread>

namespace fsdpd::client {

void Reconnector::Answered() {
  if (!lost_) return;
  std::cerr << "fsdpctl: reconnected to " << options_.coordinator << std::endl;
  lost_ = false;
  backoff_ = std::chrono::milliseconds(500);
}

bool Reconnector::WaitToRetry(const grpc::Status& status) {
  const auto now = std::chrono::steady_clock::now();
  // A coordinator going away ends calls UNAVAILABLE, or CANCELLED while it shuts down (fsdpctl
  // cancels none of its own).
  const bool gone = status.error_code() == grpc::StatusCode::UNAVAILABLE ||
                    status.error_code() == grpc::StatusCode::CANCELLED;
  if (!gone || reconnect_for_.count() <= 0 || (lost_ && now - lost_since_ >= reconnect_for_)) {
    return false;
  }
  if (!lost_) {
    std::cerr << "fsdpctl: lost the coordinator (" << status.error_message()
              << "); reconnecting for up to " << reconnect_for_.count() << " s" << std::endl;
    lost_ = true;
    lost_since_ = now;
  }
  std::this_thread::sleep_for(backoff_);
  backoff_ = std::min(backoff_ * 2, std::chrono::milliseconds(5000));
  return true;
}

}  // namespace fsdpd::client
