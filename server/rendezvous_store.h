// The key-value store that the ranks of one attempt rendezvous through, held in memory and
// scoped by (job, attempt). A scope exists only while its attempt is active, so a restarted
// attempt never sees an earlier attempt's keys. Gets that wait never hold a thread: they are
// parked with a deadline and completed by the Set that provides the key or by a timer thread.
// A scope holds what its ranks need and no more: Set and Add take the attempt's number of ranks,
// which bounds the scope's keys, each value, and all of it together (RendezvousConfig); a refusal
// names the bound and the flag that sets it.
//
// GetMany reads many keys in one call, and may read one of a value's equal parts: a rank's value
// can list one fixed-size record per peer (its address for each), and each peer reads only its
// own record. A full-mesh rendezvous of n ranks then takes a few calls per rank instead of one
// per peer (worker/comm/mesh_exchange.h), and n² records instead of n³.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "base/key_part.h"
#include "server/config.h"

namespace fsdpd::server {

class RendezvousStore {
 public:
  // Keys of at most this many bytes (the longest fsdpd or Gloo sets, "fsdpd/device/<rank>", is
  // under 24).
  static constexpr size_t kMaxKeyBytes = 256;
  // A GetMany reply holds at most this many bytes, gRPC's default receive limit less room for
  // the framing.
  static constexpr size_t kMaxReplyBytes = (4u << 20) - (64u << 10);
  using GetCallback = std::function<void(absl::StatusOr<std::string>)>;
  using ManyCallback = std::function<void(absl::StatusOr<std::vector<std::string>>)>;
  // A key to read, whole or as one of its value's equal parts (base/key_part.h).
  using KeyPart = ::fsdpd::KeyPart;
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
  // Reads every key in `keys`, in their order, waiting as Get does until the last is set;
  // `done` is called exactly once, as Get's. INVALID_ARGUMENT for a malformed key or part, or
  // more keys than the scope of `ranks` ranks can hold; FAILED_PRECONDITION for a value that
  // does not split into the parts asked; RESOURCE_EXHAUSTED for a reply over kMaxReplyBytes.
  void GetMany(const std::string& job_id, int attempt, std::vector<KeyPart> keys,
               std::chrono::milliseconds timeout, ManyCallback done, int ranks = 1);
  // OUT_OF_RANGE, leaving the counter as it was, when the sum would overflow int64.
  absl::StatusOr<int64_t> Add(const std::string& job_id, int attempt, const std::string& key,
                              int64_t delta, int ranks = 1);

  size_t ScopeCount() const;
  // Gets parked in the scope, waiting for their key; 0 for a scope that is not open.
  size_t WaiterCount(const std::string& job_id, int attempt) const;
  // Completes every parked Get with UNAVAILABLE and refuses new ones.
  void Shutdown();

 private:
  // A Get or GetMany that waits for keys not set yet.
  struct Waiter {
    std::vector<KeyPart> keys;
    std::set<std::string> missing;
    Clock::time_point deadline;
    ManyCallback done;
  };
  using Completion = std::pair<ManyCallback, absl::StatusOr<std::vector<std::string>>>;
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
  std::vector<Completion> StoreLocked(Scope& scope, const std::string& key, std::string value);
  // The reply to a read of `keys`, every one of which is set in `scope`.
  static absl::StatusOr<std::vector<std::string>> CollectLocked(const Scope& scope,
                                                                const std::vector<KeyPart>& keys);
  static void Run(std::vector<Completion>& completions);
  // INVALID_ARGUMENT for a key of no bytes or too many, or a part that does not exist.
  static absl::Status CheckKeyParts(const std::vector<KeyPart>& keys);

  const RendezvousConfig config_;
  mutable std::mutex mutex_;
  std::condition_variable timer_wakeup_;
  std::map<std::string, Scope> scopes_;
  bool stopping_ = false;
  std::thread timer_;
};

}  // namespace fsdpd::server
