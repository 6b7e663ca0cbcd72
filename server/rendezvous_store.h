// The key-value store that the ranks of one attempt rendezvous through, held in memory and
// scoped by (job, attempt). A scope exists only while its attempt is active, so a restarted
// attempt never sees an earlier attempt's keys. Gets that wait never hold a thread: they are
// parked with a deadline and completed by the Set that provides the key or by a timer thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "server/config.h"

namespace fsdpd::server {

class RendezvousStore {
 public:
  // Bounds per scope: keys of at most this many bytes, at most RendezvousConfig's
  // max_keys_per_scope keys of max_value_bytes each.
  static constexpr size_t kMaxKeyBytes = 1024;
  using GetCallback = std::function<void(absl::StatusOr<std::string>)>;
  using Clock = std::chrono::steady_clock;

  explicit RendezvousStore(RendezvousConfig config);
  ~RendezvousStore();

  // "job-000001/2"
  static std::string ScopeName(const std::string& job_id, int attempt);

  void OpenScope(const std::string& job_id, int attempt);
  // Drops the scope's keys; parked Gets complete with ABORTED.
  void DropScope(const std::string& job_id, int attempt);
  bool HasScope(const std::string& job_id, int attempt) const;

  absl::Status Set(const std::string& job_id, int attempt, const std::string& key,
                   const std::string& value);
  // Calls `done` exactly once: at once when the key exists, otherwise when it is set, when the
  // timeout passes (DEADLINE_EXCEEDED) or when the scope is dropped. `done` may run on the
  // caller's thread, on a Set's thread or on the timer thread, never under the store's lock.
  void Get(const std::string& job_id, int attempt, const std::string& key,
           std::chrono::milliseconds timeout, GetCallback done);
  // OUT_OF_RANGE, leaving the counter as it was, when the sum would overflow int64.
  absl::StatusOr<int64_t> Add(const std::string& job_id, int attempt, const std::string& key,
                              int64_t delta);

  size_t ScopeCount() const;
  // Gets parked in the scope, waiting for their key; 0 for a scope that is not open.
  size_t WaiterCount(const std::string& job_id, int attempt) const;
  // Completes every parked Get with UNAVAILABLE and refuses new ones.
  void Shutdown();

 private:
  struct Waiter {
    std::string key;
    Clock::time_point deadline;
    GetCallback done;
  };
  struct Scope {
    std::map<std::string, std::string> values;
    std::vector<Waiter> waiters;
  };

  void RunTimer();
  absl::Status CheckKeyLocked(const Scope& scope, const std::string& key) const;

  const RendezvousConfig config_;
  mutable std::mutex mutex_;
  std::condition_variable timer_wakeup_;
  std::map<std::string, Scope> scopes_;
  bool stopping_ = false;
  std::thread timer_;
};

}  // namespace fsdpd::server
