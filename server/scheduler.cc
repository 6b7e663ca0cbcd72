#include "server/scheduler.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace fsdpd::server {
namespace {

// Whether `a` comes before `b` in the queue: higher priority, then earlier submission.
bool Ahead(int priority_a, int64_t order_a, int priority_b, int64_t order_b) {
  if (priority_a != priority_b) return priority_a > priority_b;
  return order_a < order_b;
}

// Whether the worker could run one rank of the job: its kind, and enough memory when both
// figures are known.
bool Fits(const FleetWorker& worker, const SchedulableJob& job) {
  if (worker.device_kind != job.device_kind) return false;
  return worker.memory_bytes <= 0 || job.rank_memory_bytes <= 0 ||
         worker.memory_bytes >= job.rank_memory_bytes;
}

std::string Workers(int count, const std::string& kind) {
  return absl::StrCat(count, " ", kind, count == 1 ? " worker" : " workers");
}

// The largest group of `workers` that report one checkpoint root identity: only such workers
// see each other's checkpoint files. Ties go to the identity that sorts first.
std::vector<const FleetWorker*> SharingOneRoot(const std::vector<const FleetWorker*>& workers) {
  std::map<std::string, std::vector<const FleetWorker*>> by_root;
  for (const FleetWorker* worker : workers) by_root[worker->root_id].push_back(worker);
  std::vector<const FleetWorker*> largest;
  for (auto& [root_id, group] : by_root) {
    if (group.size() > largest.size()) largest = std::move(group);
  }
  return largest;
}

std::string RootHoldReason(const SchedulableJob& job, int fitting, int roots, int sharing) {
  return absl::StrCat(kHeldPrefix, "needs ", Workers(job.world_size, job.device_kind),
                      " that share one checkpoint root; the fleet's ", fitting,
                      " such workers see ", roots, " different roots, at most ", sharing,
                      " share one (give them one --checkpoint-root on a shared file system)");
}

// Picks world_size of `idle` (usable workers of one kind), packed onto as few hosts as possible.
std::vector<std::string> PackOntoHosts(const std::vector<const FleetWorker*>& idle,
                                       int world_size) {
  std::map<std::string, std::vector<const FleetWorker*>> by_host;
  for (const FleetWorker* worker : idle) by_host[worker->hostname].push_back(worker);
  std::vector<std::pair<std::string, std::vector<const FleetWorker*>>> hosts(by_host.begin(),
                                                                             by_host.end());
  // Most idle workers first; the host name breaks ties so placement is deterministic.
  std::stable_sort(hosts.begin(), hosts.end(),
                   [](const auto& a, const auto& b) { return a.second.size() > b.second.size(); });
  std::vector<std::string> chosen;
  for (auto& [hostname, workers] : hosts) {
    std::sort(workers.begin(), workers.end(), [](const FleetWorker* a, const FleetWorker* b) {
      return std::tie(a->gpu_index, a->id) < std::tie(b->gpu_index, b->id);
    });
    for (const FleetWorker* worker : workers) {
      if (static_cast<int>(chosen.size()) == world_size) return chosen;
      chosen.push_back(worker->id);
    }
  }
  return chosen;
}

// The backfilled jobs behind `head` whose workers, with `need` more, let it start: lowest
// priority first, among equals the most recently started; then those it does not need are
// spared, the highest first. Empty when all of them together are not enough.
std::vector<std::string> ChooseVictims(const SchedulableJob& head, int need,
                                       const std::vector<FleetWorker>& fleet,
                                       const std::vector<RunningJob>& running) {
  struct Candidate {
    const RunningJob* job;
    int workers;
  };
  std::vector<Candidate> candidates;
  for (const RunningJob& job : running) {
    if (!job.backfilled || job.device_kind != head.device_kind) continue;
    if (!Ahead(head.priority, head.submit_order, job.priority, job.submit_order)) continue;
    int workers = 0;
    for (const FleetWorker& worker : fleet) {
      workers += worker.state == FleetWorker::State::kRunning && worker.job_id == job.id &&
                 Fits(worker, head);
    }
    if (workers > 0) candidates.push_back({&job, workers});
  }
  std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    if (a.job->priority != b.job->priority) return a.job->priority < b.job->priority;
    if (a.job->start_order != b.job->start_order) return a.job->start_order > b.job->start_order;
    return a.job->submit_order > b.job->submit_order;
  });
  std::vector<Candidate> chosen;
  int freed = 0;
  for (const Candidate& candidate : candidates) {
    if (freed >= need) break;
    chosen.push_back(candidate);
    freed += candidate.workers;
  }
  if (freed < need) return {};
  for (int i = static_cast<int>(chosen.size()) - 1; i >= 0; --i) {
    if (freed - chosen[i].workers < need) continue;
    freed -= chosen[i].workers;
    chosen.erase(chosen.begin() + i);
  }
  std::vector<std::string> victims;
  for (const Candidate& candidate : chosen) victims.push_back(candidate.job->id);
  return victims;
}

}  // namespace

std::string WaitReason(const SchedulableJob& job, const std::vector<FleetWorker>& fleet,
                       const std::set<std::string>& taken, const SchedulableJob* behind) {
  int of_kind = 0, lost = 0, fitting = 0, idle = 0, reserved = 0, draining = 0;
  std::map<std::string, int> busy;              // job id → its workers
  std::vector<std::string> away;                // "worker-3: why"
  std::map<std::string, int> idle_other_kinds;  // kind → idle workers
  for (const FleetWorker& worker : fleet) {
    if (worker.device_kind != job.device_kind) {
      idle_other_kinds[worker.device_kind] += worker.state == FleetWorker::State::kIdle;
      continue;
    }
    ++of_kind;
    lost += worker.state == FleetWorker::State::kLost;
    if (!Fits(worker, job)) continue;
    ++fitting;
    switch (worker.state) {
      case FleetWorker::State::kIdle:
        (taken.count(worker.id) > 0 ? reserved : idle)++;
        break;
      case FleetWorker::State::kRunning:
        ++busy[worker.job_id];
        break;
      case FleetWorker::State::kDraining:
        ++draining;
        break;
      case FleetWorker::State::kAway:
        away.push_back(worker.away_reason.empty()
                           ? worker.id
                           : absl::StrCat(worker.id, " ", worker.away_reason));
        break;
      case FleetWorker::State::kLost:
        break;
    }
  }
  std::vector<std::string> parts;
  std::string reason;
  if (fitting < job.world_size) {
    const std::string registered =
        absl::StrCat(of_kind, " registered", lost > 0 ? absl::StrCat(" (", lost, " lost)") : "");
    if (of_kind < job.world_size) {
      reason = absl::StrCat(kHeldPrefix, "needs ", Workers(job.world_size, job.device_kind),
                            "; the fleet has ", registered);
    } else {
      reason = absl::StrCat(kHeldPrefix, "needs ", Workers(job.world_size, job.device_kind),
                            " with at least ", job.rank_memory_bytes >> 20,
                            " MiB each (one rank's estimate); the fleet has ", registered, ", ",
                            fitting, " with that much");
    }
  } else {
    reason = absl::StrCat(kWaitingPrefix, job.world_size, " idle ", job.device_kind,
                          job.world_size == 1 ? " worker" : " workers");
    if (of_kind > fitting) {
      absl::StrAppend(&reason, " with at least ", job.rank_memory_bytes >> 20, " MiB");
    }
    parts.push_back(absl::StrCat(idle, " idle"));
    if (reserved > 0) parts.push_back(absl::StrCat(reserved, " taken by jobs ahead in the queue"));
    for (const auto& [id, count] : busy) parts.push_back(absl::StrCat(count, " busy with ", id));
    if (draining > 0) parts.push_back(absl::StrCat(draining, " finishing an ended attempt"));
    if (lost > 0) parts.push_back(absl::StrCat(lost, " lost"));
    if (of_kind > fitting) parts.push_back(absl::StrCat(of_kind - fitting, " too small"));
  }
  if (!away.empty()) {
    parts.push_back(absl::StrCat(away.size(), " away (", absl::StrJoin(away, "; "), ")"));
  }
  if (!parts.empty()) absl::StrAppend(&reason, "; ", absl::StrJoin(parts, ", "));
  if (behind != nullptr) {
    absl::StrAppend(&reason, "; behind ", behind->id, " (priority ", behind->priority,
                    "), which is ahead in the queue for ", behind->device_kind, " workers");
  }
  if (idle == 0 && reserved == 0) {
    std::vector<std::string> others;
    for (const auto& [kind, count] : idle_other_kinds) {
      if (count > 0) others.push_back(Workers(count, kind));
    }
    if (!others.empty()) {
      absl::StrAppend(&reason, "; idle now: ", absl::StrJoin(others, ", "), ", 0 ",
                      job.device_kind);
    }
  }
  return reason;
}

Schedule ScheduleGangs(std::vector<SchedulableJob> waiting, std::vector<FleetWorker> fleet,
                       const std::vector<RunningJob>& running) {
  std::stable_sort(waiting.begin(), waiting.end(),
                   [](const SchedulableJob& a, const SchedulableJob& b) {
                     return Ahead(a.priority, a.submit_order, b.priority, b.submit_order);
                   });
  Schedule schedule;
  std::set<std::string> taken;  // idle workers placed or reserved in this pass
  std::map<std::string, const SchedulableJob*> head_of;  // device kind → the head job
  for (const SchedulableJob& job : waiting) {
    if (job.world_size < 1) continue;
    std::vector<const FleetWorker*> fitting;
    for (const FleetWorker& worker : fleet) {
      if (Fits(worker, job)) fitting.push_back(&worker);
    }
    if (static_cast<int>(fitting.size()) < job.world_size) {
      schedule.holds.push_back({job.id, WaitReason(job, fleet, taken, nullptr)});
      continue;
    }
    const int sharing = static_cast<int>(SharingOneRoot(fitting).size());
    if (sharing < job.world_size) {
      std::set<std::string> roots;
      for (const FleetWorker* worker : fitting) roots.insert(worker->root_id);
      schedule.holds.push_back({job.id, RootHoldReason(job, static_cast<int>(fitting.size()),
                                                       static_cast<int>(roots.size()), sharing)});
      continue;
    }
    std::vector<const FleetWorker*> idle;
    int draining = 0;
    for (const FleetWorker& worker : fleet) {
      if (!Fits(worker, job)) continue;
      if (worker.state == FleetWorker::State::kIdle && taken.count(worker.id) == 0) {
        idle.push_back(&worker);
      }
      draining += worker.state == FleetWorker::State::kDraining;
    }
    idle = SharingOneRoot(idle);
    const auto head = head_of.find(job.device_kind);
    if (static_cast<int>(idle.size()) >= job.world_size) {
      Placement placement;
      placement.job_id = job.id;
      placement.worker_ids = PackOntoHosts(idle, job.world_size);
      if (head != head_of.end()) {
        placement.backfilled = true;
        placement.ahead_of = head->second->id;
      }
      taken.insert(placement.worker_ids.begin(), placement.worker_ids.end());
      schedule.placements.push_back(std::move(placement));
      continue;
    }
    if (head != head_of.end()) {  // waits behind the head; may still backfill later
      schedule.waits.push_back({job.id, WaitReason(job, fleet, taken, head->second)});
      continue;
    }
    head_of[job.device_kind] = &job;
    schedule.waits.push_back({job.id, WaitReason(job, fleet, taken, nullptr)});
    const int need = job.world_size - static_cast<int>(idle.size()) - draining;
    std::vector<std::string> victims;
    if (need > 0) {
      victims = ChooseVictims(job, need, fleet, running);
      if (victims.empty()) continue;  // waits for jobs that were not lent workers; reserves none
    }
    for (const FleetWorker* worker : idle) taken.insert(worker->id);
    for (const std::string& victim : victims) schedule.preemptions.push_back({victim, job.id});
  }
  return schedule;
}

}  // namespace fsdpd::server
