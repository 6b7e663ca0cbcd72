// Whether the kernel's OOM killer ended this worker's previous process, and during which
// attempt. Attempts run inside the worker process, so an OOM kill takes the worker with it and
// nobody is left to say why. Each time the worker starts an attempt it writes a small file (in
// its checkpoint root, named by host and device) with the attempt and its memory cgroup's
// oom_kill count (cgroup_memory.h); a clean shutdown removes it. A restarted worker that finds
// the file, in the same cgroup, with the count risen since, reports that attempt as killed by
// the OOM killer when it registers; the coordinator believes it only for the rank it had
// assigned to that worker (server/job_manager.h, NoteOomKillLocked).
//
// A counter that was reset (the cgroup was made anew, as a container restart does) hides the
// kill: the attempt then fails as the worker restarting, without the OOM reason.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "worker/device/cgroup_memory.h"

namespace fsdpd {

struct AttemptOnRecord {
  std::string job_id;
  std::string job_uid;
  int attempt = 0;
  int rank = 0;
};

struct OomKillReport {
  AttemptOnRecord attempt;
  std::string cgroup;  // the directory of the cgroup whose count rose
  int64_t oom_kills_before = 0;
  int64_t oom_kills_after = 0;
};

class OomEvidence {
 public:
  // `file`: where the record lives. `read_cgroup` reads the cgroup now (tests pass a fake).
  explicit OomEvidence(
      std::string file,
      std::function<CgroupMemory()> read_cgroup = [] { return ReadCgroupMemory(); });

  // The attempt the previous process was running when the OOM killer ended it, if it was.
  std::optional<OomKillReport> PreviousKill() const;
  // Records the attempt this process starts, with the cgroup's count now. A record that cannot
  // be written is logged and skipped: it only loses the OOM reason of a later kill.
  void Started(const AttemptOnRecord& attempt);
  // A clean end: nothing to report at the next start.
  void Clear();

  const std::string& file() const { return file_; }

 private:
  const std::string file_;
  const std::function<CgroupMemory()> read_cgroup_;
};

// <checkpoint_root>/.fsdpd-worker/<hostname>-<device>.attempt, with any character of the host
// or device other than [A-Za-z0-9._-] replaced by '_'.
std::string OomEvidenceFile(const std::string& checkpoint_root, const std::string& hostname,
                            const std::string& device);

}  // namespace fsdpd
