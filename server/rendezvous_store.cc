#include "server/rendezvous_store.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace fsdpd::server {

RendezvousStore::RendezvousStore(RendezvousConfig config)
    : config_(std::move(config)), timer_([this] { RunTimer(); }) {}

RendezvousStore::~RendezvousStore() {
  Shutdown();
  timer_.join();
}

void RendezvousStore::Shutdown() {
  std::vector<GetCallback> aborted;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    for (auto& [name, scope] : scopes_) {
      for (Waiter& waiter : scope.waiters) aborted.push_back(std::move(waiter.done));
      scope.waiters.clear();
    }
  }
  timer_wakeup_.notify_all();
  for (GetCallback& done : aborted) done(absl::UnavailableError("coordinator shutting down"));
}

std::string RendezvousStore::ScopeName(const std::string& job_id, int attempt) {
  return absl::StrCat(job_id, "/", attempt);
}

void RendezvousStore::OpenScope(const std::string& job_id, int attempt) {
  std::lock_guard<std::mutex> lock(mutex_);
  scopes_.try_emplace(ScopeName(job_id, attempt));
}

void RendezvousStore::DropScope(const std::string& job_id, int attempt) {
  std::vector<GetCallback> aborted;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = scopes_.find(ScopeName(job_id, attempt));
    if (found == scopes_.end()) return;
    for (Waiter& waiter : found->second.waiters) aborted.push_back(std::move(waiter.done));
    scopes_.erase(found);
  }
  for (GetCallback& done : aborted) {
    done(absl::AbortedError(
        absl::StrCat("attempt ", ScopeName(job_id, attempt), " ended while waiting for a key")));
  }
}

bool RendezvousStore::HasScope(const std::string& job_id, int attempt) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return scopes_.count(ScopeName(job_id, attempt)) > 0;
}

size_t RendezvousStore::ScopeCount() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return scopes_.size();
}

size_t RendezvousStore::WaiterCount(const std::string& job_id, int attempt) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = scopes_.find(ScopeName(job_id, attempt));
  return found == scopes_.end() ? 0 : found->second.waiters.size();
}

int64_t RendezvousStore::MaxValueBytes(int ranks) const {
  return config_.max_value_bytes + config_.value_bytes_per_rank * std::max(ranks, 1);
}

absl::Status RendezvousStore::CheckSetLocked(const std::string& name, const Scope& scope,
                                             const std::string& key, const std::string& value,
                                             int ranks) const {
  ranks = std::max(ranks, 1);
  if (key.empty()) return absl::InvalidArgumentError("rendezvous key must not be empty");
  if (key.size() > kMaxKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("rendezvous key is ", key.size(), " bytes; at most ", kMaxKeyBytes));
  }
  const int64_t max_value = MaxValueBytes(ranks);
  if (static_cast<int64_t>(value.size()) > max_value) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rendezvous value for key \"", key, "\" is ", value.size(), " bytes; a value in scope ",
        name, " of ", ranks, " ranks takes at most ", max_value, " (--rendezvous-value-bytes ",
        config_.max_value_bytes, " plus ", config_.value_bytes_per_rank, " per rank)"));
  }
  auto existing = scope.values.find(key);
  const int64_t max_keys = static_cast<int64_t>(config_.max_keys_per_rank) * ranks;
  if (existing == scope.values.end() && static_cast<int64_t>(scope.values.size()) >= max_keys) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "rendezvous scope ", name, " holds ", scope.values.size(), " keys, the most for ", ranks,
        " ranks (--rendezvous-keys-per-rank ", config_.max_keys_per_rank, ")"));
  }
  const int64_t bytes =
      scope.bytes + static_cast<int64_t>(value.size()) -
      (existing == scope.values.end() ? -static_cast<int64_t>(key.size())
                                      : static_cast<int64_t>(existing->second.size()));
  const int64_t max_bytes = max_value * ranks;
  if (bytes > max_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "rendezvous scope ", name, " would hold ", bytes, " bytes; ", ranks, " ranks take at most ",
        max_bytes, " (one value of at most ", max_value, " bytes per rank)"));
  }
  return absl::OkStatus();
}

std::vector<RendezvousStore::GetCallback> RendezvousStore::StoreLocked(Scope& scope,
                                                                       const std::string& key,
                                                                       std::string value) {
  auto [entry, added] = scope.values.try_emplace(key);
  scope.bytes +=
      static_cast<int64_t>(value.size()) -
      (added ? -static_cast<int64_t>(key.size()) : static_cast<int64_t>(entry->second.size()));
  entry->second = std::move(value);
  std::vector<GetCallback> ready;
  auto waiting = std::stable_partition(scope.waiters.begin(), scope.waiters.end(),
                                       [&](const Waiter& waiter) { return waiter.key != key; });
  for (auto it = waiting; it != scope.waiters.end(); ++it) ready.push_back(std::move(it->done));
  scope.waiters.erase(waiting, scope.waiters.end());
  return ready;
}

absl::Status RendezvousStore::Set(const std::string& job_id, int attempt, const std::string& key,
                                  const std::string& value, int ranks) {
  std::vector<GetCallback> ready;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::string name = ScopeName(job_id, attempt);
    auto found = scopes_.find(name);
    if (found == scopes_.end()) {
      return absl::FailedPreconditionError(absl::StrCat("no active attempt ", name));
    }
    Scope& scope = found->second;
    if (absl::Status status = CheckSetLocked(name, scope, key, value, ranks); !status.ok()) {
      return status;
    }
    ready = StoreLocked(scope, key, value);
  }
  for (GetCallback& done : ready) done(value);
  return absl::OkStatus();
}

void RendezvousStore::Get(const std::string& job_id, int attempt, const std::string& key,
                          std::chrono::milliseconds timeout, GetCallback done) {
  if (timeout.count() <= 0) timeout = config_.default_get_timeout;
  timeout = std::min(timeout, config_.max_get_timeout);
  absl::StatusOr<std::string> immediate;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = scopes_.find(ScopeName(job_id, attempt));
    if (stopping_) {
      immediate = absl::UnavailableError("coordinator shutting down");
    } else if (found == scopes_.end()) {
      immediate = absl::FailedPreconditionError(
          absl::StrCat("no active attempt ", ScopeName(job_id, attempt)));
    } else if (key.empty() || key.size() > kMaxKeyBytes) {
      immediate = absl::InvalidArgumentError(
          absl::StrCat("rendezvous key must be 1..", kMaxKeyBytes, " bytes"));
    } else if (auto value = found->second.values.find(key); value != found->second.values.end()) {
      immediate = value->second;
    } else {
      found->second.waiters.push_back({key, Clock::now() + timeout, std::move(done)});
      timer_wakeup_.notify_all();
      return;
    }
  }
  done(std::move(immediate));
}

absl::StatusOr<int64_t> RendezvousStore::Add(const std::string& job_id, int attempt,
                                             const std::string& key, int64_t delta, int ranks) {
  std::vector<GetCallback> ready;
  std::string text;
  int64_t value = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::string name = ScopeName(job_id, attempt);
    auto found = scopes_.find(name);
    if (found == scopes_.end()) {
      return absl::FailedPreconditionError(absl::StrCat("no active attempt ", name));
    }
    Scope& scope = found->second;
    // Counters live in the same map as decimal text, so a Get of a counter sees its value.
    auto existing = scope.values.find(key);
    if (existing != scope.values.end() && !absl::SimpleAtoi(existing->second, &value)) {
      return absl::FailedPreconditionError(
          absl::StrCat("rendezvous key \"", key, "\" holds a value that is not an integer"));
    }
    // A counter that would wrap is refused and keeps its value.
    if ((delta > 0 && value > std::numeric_limits<int64_t>::max() - delta) ||
        (delta < 0 && value < std::numeric_limits<int64_t>::min() - delta)) {
      return absl::OutOfRangeError(absl::StrCat("rendezvous counter \"", key, "\" at ", value,
                                                " would overflow adding ", delta));
    }
    text = absl::StrCat(value + delta);
    if (absl::Status status = CheckSetLocked(name, scope, key, text, ranks); !status.ok()) {
      return status;
    }
    value += delta;
    ready = StoreLocked(scope, key, text);
  }
  for (GetCallback& done : ready) done(text);
  return value;
}

void RendezvousStore::RunTimer() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    Clock::time_point earliest = Clock::time_point::max();
    for (const auto& [name, scope] : scopes_) {
      for (const Waiter& waiter : scope.waiters) earliest = std::min(earliest, waiter.deadline);
    }
    if (earliest == Clock::time_point::max()) {
      timer_wakeup_.wait(lock);
    } else {
      timer_wakeup_.wait_until(lock, earliest);
    }
    if (stopping_) break;
    const Clock::time_point now = Clock::now();
    std::vector<std::pair<std::string, GetCallback>> expired;
    for (auto& [name, scope] : scopes_) {
      auto live =
          std::stable_partition(scope.waiters.begin(), scope.waiters.end(),
                                [&](const Waiter& waiter) { return waiter.deadline > now; });
      for (auto it = live; it != scope.waiters.end(); ++it) {
        expired.emplace_back(absl::StrCat("key \"", it->key, "\" of ", name), std::move(it->done));
      }
      scope.waiters.erase(live, scope.waiters.end());
    }
    if (expired.empty()) continue;
    lock.unlock();
    for (auto& [what, done] : expired) {
      done(absl::DeadlineExceededError(absl::StrCat(what, " was not set in time")));
    }
    lock.lock();
  }
}

}  // namespace fsdpd::server
