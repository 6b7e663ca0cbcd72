// One coordinator per state folder. The coordinator holds an exclusive flock(2) on
// <state-dir>/fsdpd.lock for as long as it runs; the kernel drops the lock when the process ends,
// however it ends (kill -9 included), so a lock is never stale. The file says who holds it: pid,
// host and the addresses it serves, so a second coordinator started on the same folder refuses
// at once, naming the running one, before it opens or writes anything else there. A holder that
// is shutting down says so in the file (`stopping`); a newcomer then waits for it to let go, up
// to kStoppingWait, so a restart right after SIGTERM (the old process still flushing) works.
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace fsdpd::server {

class StateLock {
 public:
  // Takes the lock and records this process (pid, host, `listen` as configured: the port may
  // still be 0). FAILED_PRECONDITION naming the holder (pid, host, addresses) when another
  // process holds it; FAILED_PRECONDITION naming the file when it cannot be created or locked.
  static absl::StatusOr<std::unique_ptr<StateLock>> Acquire(const std::string& state_dir,
                                                            const std::string& listen);
  // Releases the lock and removes the file (still holding it while removing, so a process
  // waiting on the old file sees it is gone and takes a new one).
  ~StateLock();
  StateLock(const StateLock&) = delete;
  StateLock& operator=(const StateLock&) = delete;

  // Records where this process serves, once its ports are bound ("127.0.0.1:7070", and
  // "" for a port that is off).
  absl::Status RecordAddresses(const std::string& listen, const std::string& metrics,
                               const std::string& health);

  // Marks the holder as shutting down: a coordinator starting on the same folder waits for the
  // lock instead of refusing. Best effort; the lock itself is unchanged.
  void MarkStopping();

  const std::string& path() const { return path_; }

  // How long a newcomer waits for a holder that says it is stopping.
  static constexpr int kStoppingWaitSeconds = 30;

  // The lock file's name inside the state folder.
  static constexpr char kFileName[] = "fsdpd.lock";

 private:
  StateLock(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  absl::Status Write(const std::string& text);
  std::string Describe(const std::string& listen, const std::string& metrics,
                       const std::string& health) const;

  std::string listen_, metrics_, health_;

  std::string path_;
  int fd_ = -1;
};

}  // namespace fsdpd::server
