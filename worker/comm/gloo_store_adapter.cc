#include "worker/comm/gloo_store_adapter.h"

#include "gloo/common/error.h"

namespace fsdpd {

void GlooStoreAdapter::set(const std::string& key, const std::vector<char>& data) {
  absl::Status status = store_->Set(prefix_ + key, std::string(data.begin(), data.end()));
  if (!status.ok()) {
    throw gloo::IoException("rendezvous store set '" + key + "': " + status.ToString());
  }
}

std::vector<char> GlooStoreAdapter::get(const std::string& key) {
  if (auto found = waited_.find(key); found != waited_.end()) {
    std::vector<char> value(found->second.begin(), found->second.end());
    waited_.erase(found);
    return value;
  }
  absl::StatusOr<std::string> value = store_->Get(prefix_ + key, timeout_);
  if (!value.ok()) {
    throw gloo::IoException("rendezvous store get '" + key + "': " + value.status().ToString());
  }
  return std::vector<char>(value->begin(), value->end());
}

void GlooStoreAdapter::wait(const std::vector<std::string>& keys,
                            const std::chrono::milliseconds& timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (const std::string& key : keys) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() < 0) left = std::chrono::milliseconds(0);
    absl::StatusOr<std::string> value = store_->Get(prefix_ + key, left);
    if (!value.ok()) {
      throw gloo::IoException("rendezvous store wait '" + key + "': " + value.status().ToString());
    }
    waited_[key] = *std::move(value);
  }
}

}  // namespace fsdpd
