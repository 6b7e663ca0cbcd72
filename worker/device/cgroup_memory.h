// The memory cgroup this process lives in: the limit it may use and how many times the kernel's
// OOM killer acted in it. A CPU worker reports min(physical memory, this limit) to the
// coordinator, and counts OOM kills to tell, once restarted, whether the OOM killer ended its
// previous process (oom_evidence.h).
//
// cgroup v2 (one "0::/path" line in /proc/self/cgroup): <mount>/<path>/memory.max ("max": no
// limit) and memory.events' oom_kill. cgroup v1 (a line whose controllers include "memory"; it
// wins on hybrid hosts, where the memory controller is on v1): <mount>/memory/<path>/
// memory.limit_in_bytes (a value near 2^63 means none) and memory.oom_control's oom_kill. The
// limit is the smallest found from the process's cgroup up to the mount's root, since a parent's
// limit binds its children too. Inside a container with its own cgroup namespace the path is "/"
// and the mount is the container's cgroup; where the path does not exist under the mount, the
// mount's root stands for it. Nothing here fails: what cannot be read is left unknown.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace fsdpd {

struct CgroupRoots {
  std::string proc_self_cgroup = "/proc/self/cgroup";
  std::string mount = "/sys/fs/cgroup";
};

struct CgroupMemory {
  int version = 0;   // 1 or 2; 0: no memory cgroup found
  std::string path;  // as /proc/self/cgroup names it, e.g. "/system.slice/fsdpd-worker.service"
  std::string directory;    // where its files were read
  int64_t limit_bytes = 0;  // the smallest limit up to the root; 0: none
  std::optional<int64_t> oom_kills;
};

CgroupMemory ReadCgroupMemory(const CgroupRoots& roots = {});

// What a process may use of `physical` bytes under `cgroup`'s limit.
int64_t UsableHostMemory(int64_t physical, const CgroupMemory& cgroup);

}  // namespace fsdpd
