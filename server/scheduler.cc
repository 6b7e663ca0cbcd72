#include "server/scheduler.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

namespace fsdpd::server {
namespace {

// Picks world_size workers from `pool` (all of one device kind) and removes them from it.
std::vector<std::string> PackOntoHosts(std::vector<IdleWorker>& pool, int world_size) {
  std::map<std::string, std::vector<IdleWorker>> by_host;
  for (IdleWorker& worker : pool) by_host[worker.hostname].push_back(std::move(worker));
  std::vector<std::pair<std::string, std::vector<IdleWorker>>> hosts(by_host.begin(),
                                                                     by_host.end());
  // Most idle workers first; the host name breaks ties so placement is deterministic.
  std::stable_sort(hosts.begin(), hosts.end(),
                   [](const auto& a, const auto& b) { return a.second.size() > b.second.size(); });
  std::vector<std::string> chosen;
  pool.clear();
  for (auto& [hostname, workers] : hosts) {
    std::sort(workers.begin(), workers.end(), [](const IdleWorker& a, const IdleWorker& b) {
      return std::tie(a.gpu_index, a.id) < std::tie(b.gpu_index, b.id);
    });
    for (IdleWorker& worker : workers) {
      if (static_cast<int>(chosen.size()) < world_size) {
        chosen.push_back(worker.id);
      } else {
        pool.push_back(std::move(worker));
      }
    }
  }
  return chosen;
}

}  // namespace

std::vector<Placement> ScheduleGangs(std::vector<SchedulableJob> jobs,
                                     std::vector<IdleWorker> idle_workers) {
  std::stable_sort(jobs.begin(), jobs.end(), [](const SchedulableJob& a, const SchedulableJob& b) {
    if (a.priority != b.priority) return a.priority > b.priority;
    return a.submit_order < b.submit_order;
  });
  std::map<std::string, std::vector<IdleWorker>> pools;
  for (IdleWorker& worker : idle_workers) {
    if (worker.can_checkpoint) pools[worker.device_kind].push_back(std::move(worker));
  }

  std::set<std::string> blocked_kinds;
  std::vector<Placement> placements;
  for (const SchedulableJob& job : jobs) {
    if (blocked_kinds.count(job.device_kind) > 0) continue;
    std::vector<IdleWorker>& pool = pools[job.device_kind];
    if (job.world_size < 1 || static_cast<int>(pool.size()) < job.world_size) {
      blocked_kinds.insert(job.device_kind);
      continue;
    }
    placements.push_back({job.id, PackOntoHosts(pool, job.world_size)});
  }
  return placements;
}

}  // namespace fsdpd::server
