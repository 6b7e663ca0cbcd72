// The key-value store that the ranks of one attempt rendezvous through, held in memory and
// scoped by (job, attempt). A scope exists only while its attempt is active, so a restarted
// attempt never sees an earlier attempt's keys. Gets that wait never hold a thread: they are
// parked with a deadline and completed by the Set that provides the key or by a timer thread.
// A scope holds what its ranks need and no more: Set and Add take the attempt's number of ranks,
// which bounds the scope's keys, each value, and all of it together (RendezvousConfig); a refusal
// names the bound and the flag that sets it.
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
  // Keys of at most this many bytes (the longest fsdpd or Gloo sets, "fsdpd/device/<rank>", is
  // under 24).
  static constexpr size_t kMaxKeyBytes = 256;
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

  // `ranks`: the attempt's ranks, which size the scope's bounds. INVALID_ARGUMENT for a key or
  // value over its bound, RESOURCE_EXHAUSTED when the scope would hold too many keys or bytes.
  absl::Status Set(const std::string& job_id, int attempt, const std::string& key,
                   const std::string& value, int ranks = 1);
  // Calls `done` exactly once: at once when the key exists, otherwise when it is set, when the
  // timeout passes (DEADLINE_EXCEEDED) or when the scope is dropped. `done` may run on the
  // caller's thread, on a Set's thread or on the timer thread, never under the store's lock.
  void Get(const std::string& job_id, int attempt, const std::string& key,
           std::chrono::milliseconds timeout, GetCallback done);
  // OUT_OF_RANGE, leaving the counter as it was, when the sum would overflow int64.
  absl::StatusOr<int64_t> Add(const std::string& job_id, int attempt, const std::string& key,
                              int64_t delta, int ranks = 1);

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
    int64_t bytes = 0;  // of every key and value held
    std::vector<Waiter> waiters;
  };

  void RunTimer();
  // The largest value a scope of `ranks` ranks takes.
  int64_t MaxValueBytes(int ranks) const;
  // Whether `key` may be set to `value` in the scope of `ranks` ranks.
  absl::Status CheckSetLocked(const std::string& name, const Scope& scope, const std::string& key,
                              const std::string& value, int ranks) const;
  // Stores the value and completes the Gets waiting for the key, returned to run unlocked.
  std::vector<GetCallback> StoreLocked(Scope& scope, const std::string& key, std::string value);

  const RendezvousConfig config_;
  mutable std::mutex mutex_;
  std::condition_variable timer_wakeup_;
  std::map<std::string, Scope> scopes_;
  bool stopping_ = false;
  std::thread timer_;
};

}  // namespace fsdpd::server
