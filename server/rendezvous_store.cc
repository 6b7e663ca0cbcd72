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
  std::vector<ManyCallback> aborted;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    for (auto& [name, scope] : scopes_) {
      for (Waiter& waiter : scope.waiters) aborted.push_back(std::move(waiter.done));
      scope.waiters.clear();
    }
  }
  timer_wakeup_.notify_all();
  for (ManyCallback& done : aborted) done(absl::UnavailableError("coordinator shutting down"));
}

void RendezvousStore::Run(std::vector<Completion>& completions) {
  for (auto& [done, reply] : completions) done(std::move(reply));
}

std::string RendezvousStore::ScopeName(const std::string& job_id, int attempt) {
  return absl::StrCat(job_id, "/", attempt);
}

void RendezvousStore::OpenScope(const std::string& job_id, int attempt) {
  std::lock_guard<std::mutex> lock(mutex_);
  scopes_.try_emplace(ScopeName(job_id, attempt));
}

void RendezvousStore::DropScope(const std::string& job_id, int attempt) {
  std::vector<ManyCallback> aborted;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = scopes_.find(ScopeName(job_id, attempt));
    if (found == scopes_.end()) return;
    for (Waiter& waiter : found->second.waiters) aborted.push_back(std::move(waiter.done));
    scopes_.erase(found);
  }
  for (ManyCallback& done : aborted) {
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

std::vector<RendezvousStore::Completion> RendezvousStore::StoreLocked(Scope& scope,
                                                                      const std::string& key,
                                                                      std::string value) {
  auto [entry, added] = scope.values.try_emplace(key);
  scope.bytes +=
      static_cast<int64_t>(value.size()) -
      (added ? -static_cast<int64_t>(key.size()) : static_cast<int64_t>(entry->second.size()));
  entry->second = std::move(value);
  std::vector<Completion> ready;
  for (Waiter& waiter : scope.waiters) waiter.missing.erase(key);
  auto waiting =
      std::stable_partition(scope.waiters.begin(), scope.waiters.end(),
                            [](const Waiter& waiter) { return !waiter.missing.empty(); });
  for (auto it = waiting; it != scope.waiters.end(); ++it) {
    ready.emplace_back(std::move(it->done), CollectLocked(scope, it->keys));
  }
  scope.waiters.erase(waiting, scope.waiters.end());
  return ready;
}

absl::StatusOr<std::vector<std::string>> RendezvousStore::CollectLocked(
    const Scope& scope, const std::vector<KeyPart>& keys) {
  std::vector<std::string> reply;
  reply.reserve(keys.size());
  size_t bytes = 0;
  for (const KeyPart& asked : keys) {
    absl::StatusOr<std::string> part = ValuePart(asked, scope.values.at(asked.key));
    if (!part.ok()) return part.status();
    reply.push_back(*std::move(part));
    bytes += reply.back().size() + asked.key.size();
    if (bytes > kMaxReplyBytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat("rendezvous reply for ", keys.size(), " keys would exceed ", kMaxReplyBytes,
                       " bytes; ask for fewer keys, or for parts of their values"));
    }
  }
  return reply;
}

absl::Status RendezvousStore::Set(const std::string& job_id, int attempt, const std::string& key,
                                  const std::string& value, int ranks) {
  std::vector<Completion> ready;
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
  Run(ready);
  return absl::OkStatus();
}

void RendezvousStore::Get(const std::string& job_id, int attempt, const std::string& key,
                          std::chrono::milliseconds timeout, GetCallback done) {
  GetMany(
      job_id, attempt, {KeyPart{key}}, timeout,
      [done = std::move(done)](absl::StatusOr<std::vector<std::string>> values) {
        if (!values.ok()) return done(values.status());
        done(std::move(values->front()));
      },
      1);
}

void RendezvousStore::GetMany(const std::string& job_id, int attempt, std::vector<KeyPart> keys,
                              std::chrono::milliseconds timeout, ManyCallback done, int ranks) {
  if (timeout.count() <= 0) timeout = config_.default_get_timeout;
  timeout = std::min(timeout, config_.max_get_timeout);
  const int64_t max_keys = static_cast<int64_t>(config_.max_keys_per_rank) * std::max(ranks, 1);
  absl::StatusOr<std::vector<std::string>> immediate;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = scopes_.find(ScopeName(job_id, attempt));
    if (stopping_) {
      immediate = absl::UnavailableError("coordinator shutting down");
    } else if (found == scopes_.end()) {
      immediate = absl::FailedPreconditionError(
          absl::StrCat("no active attempt ", ScopeName(job_id, attempt)));
    } else if (static_cast<int64_t>(keys.size()) > max_keys) {
      immediate = absl::InvalidArgumentError(
          absl::StrCat("rendezvous read of ", keys.size(), " keys; scope ",
                       ScopeName(job_id, attempt), " holds at most ", max_keys));
    } else if (absl::Status malformed = CheckKeyParts(keys); !malformed.ok()) {
      immediate = malformed;
    } else {
      Waiter waiter{std::move(keys), {}, Clock::now() + timeout, std::move(done)};
      for (const KeyPart& asked : waiter.keys) {
        if (found->second.values.count(asked.key) == 0) waiter.missing.insert(asked.key);
      }
      if (waiter.missing.empty()) {
        immediate = CollectLocked(found->second, waiter.keys);
        done = std::move(waiter.done);
      } else {
        found->second.waiters.push_back(std::move(waiter));
        timer_wakeup_.notify_all();
        return;
      }
    }
  }
  done(std::move(immediate));
}

absl::Status RendezvousStore::CheckKeyParts(const std::vector<KeyPart>& keys) {
  for (const KeyPart& asked : keys) {
    if (asked.key.empty() || asked.key.size() > kMaxKeyBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("rendezvous key must be 1..", kMaxKeyBytes, " bytes"));
    }
    if (absl::Status malformed = CheckKeyPart(asked); !malformed.ok()) return malformed;
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> RendezvousStore::Add(const std::string& job_id, int attempt,
                                             const std::string& key, int64_t delta, int ranks) {
  std::vector<Completion> ready;
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
  Run(ready);
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
    std::vector<std::pair<std::string, ManyCallback>> expired;
    for (auto& [name, scope] : scopes_) {
      auto live =
          std::stable_partition(scope.waiters.begin(), scope.waiters.end(),
                                [&](const Waiter& waiter) { return waiter.deadline > now; });
      for (auto it = live; it != scope.waiters.end(); ++it) {
        const size_t others = it->missing.size() - 1;
        expired.emplace_back(
            absl::StrCat("key \"", *it->missing.begin(), "\" of ", name,
                         others == 0 ? "" : absl::StrCat(" (and ", others, " more)")),
            std::move(it->done));
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
