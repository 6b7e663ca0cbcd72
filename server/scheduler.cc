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

// Whether the worker could run one rank of the job: its kind, enough memory and a new enough
// GPU, each when both figures are known.
bool Fits(const FleetWorker& worker, const SchedulableJob& job) {
  if (worker.device_kind != job.device_kind) return false;
  if (worker.compute_capability > 0 && job.min_compute_capability > 0 &&
      worker.compute_capability < job.min_compute_capability) {
    return false;
  }
  return worker.memory_bytes <= 0 || job.rank_memory_bytes <= 0 ||
         worker.memory_bytes >= job.rank_memory_bytes;
}

// " and compute capability 8.9 or newer" when the job needs a newer GPU than any, for a reason.
std::string GpuRequirement(const SchedulableJob& job) {
  if (job.min_compute_capability <= 0) return "";
  return absl::StrCat(" and compute capability ", job.min_compute_capability / 10, ".",
                      job.min_compute_capability % 10, " or newer");
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

// What one scan of the fleet finds for one job shape (device kind and rank memory), given the
// idle workers already taken in this pass. Jobs of one shape share it: a queue of thousands of
// jobs costs one scan of the fleet per shape, not one per job (bench/RESULTS.md, "At cluster
// scale").
struct ShapeTally {
  int of_kind = 0;
  int lost = 0;
  int reserved = 0;                         // fitting, idle, and taken in this pass
  int draining = 0;                         // fitting and finishing an ended attempt
  std::vector<const FleetWorker*> fitting;  // could run a rank, whatever their state
  std::vector<const FleetWorker*> idle;     // fitting, idle, not taken
  std::map<std::string, int> busy;          // job id → its fitting workers
  std::vector<std::string> away;            // "worker-3 why"
  std::map<std::string, int> idle_other_kinds;
  int roots = 0;            // distinct checkpoint roots among `fitting`
  int fitting_sharing = 0;  // the largest group of `fitting` that shares one root
};

ShapeTally TallyShape(const SchedulableJob& job, const std::vector<FleetWorker>& fleet,
                      const std::set<std::string>& taken) {
  ShapeTally tally;
  for (const FleetWorker& worker : fleet) {
    if (worker.device_kind != job.device_kind) {
      tally.idle_other_kinds[worker.device_kind] += worker.state == FleetWorker::State::kIdle;
      continue;
    }
    ++tally.of_kind;
    tally.lost += worker.state == FleetWorker::State::kLost;
    if (!Fits(worker, job)) continue;
    tally.fitting.push_back(&worker);
    switch (worker.state) {
      case FleetWorker::State::kIdle:
        if (taken.count(worker.id) > 0) {
          ++tally.reserved;
        } else {
          tally.idle.push_back(&worker);
        }
        break;
      case FleetWorker::State::kRunning:
        ++tally.busy[worker.job_id];
        break;
      case FleetWorker::State::kDraining:
        ++tally.draining;
        break;
      case FleetWorker::State::kAway:
        tally.away.push_back(worker.away_reason.empty()
                                 ? worker.id
                                 : absl::StrCat(worker.id, " ", worker.away_reason));
        break;
      case FleetWorker::State::kLost:
        break;
    }
  }
  std::set<std::string> roots;
  for (const FleetWorker* worker : tally.fitting) roots.insert(worker->root_id);
  tally.roots = static_cast<int>(roots.size());
  tally.fitting_sharing = static_cast<int>(SharingOneRoot(tally.fitting).size());
  return tally;
}

// Why `job` does not start now, for a person: what it needs, what the fleet has of it (idle,
// busy with which jobs, finishing, away and why, lost, too small), the job it waits behind
// (`behind`: the head of its kind, or null), and what is idle of other kinds when none of its
// kind is. `tally` is its shape's, with the idle workers placed or reserved in this pass taken.
// Held (the fleet could not run it) starts with kHeldPrefix, anything else with kWaitingPrefix.
std::string WaitReason(const SchedulableJob& job, const ShapeTally& tally,
                       const SchedulableJob* behind) {
  const int fitting = static_cast<int>(tally.fitting.size());
  const int idle = static_cast<int>(tally.idle.size());
  std::vector<std::string> parts;
  std::string reason;
  if (fitting < job.world_size) {
    const std::string registered =
        absl::StrCat(tally.of_kind, " registered",
                     tally.lost > 0 ? absl::StrCat(" (", tally.lost, " lost)") : "");
    if (tally.of_kind < job.world_size) {
      reason = absl::StrCat(kHeldPrefix, "needs ", Workers(job.world_size, job.device_kind),
                            "; the fleet has ", registered);
    } else {
      reason = absl::StrCat(kHeldPrefix, "needs ", Workers(job.world_size, job.device_kind),
                            " with at least ", job.rank_memory_bytes >> 20,
                            " MiB each (one rank's estimate)", GpuRequirement(job),
                            "; the fleet has ", registered, ", ", fitting,
                            job.min_compute_capability > 0 ? " that fit" : " with that much");
    }
  } else {
    reason = absl::StrCat(kWaitingPrefix, job.world_size, " idle ", job.device_kind,
                          job.world_size == 1 ? " worker" : " workers");
    if (tally.of_kind > fitting) {
      absl::StrAppend(&reason, " with at least ", job.rank_memory_bytes >> 20, " MiB",
                      GpuRequirement(job));
    }
    parts.push_back(absl::StrCat(idle, " idle"));
    if (tally.reserved > 0) {
      parts.push_back(absl::StrCat(tally.reserved, " taken by jobs ahead in the queue"));
    }
    for (const auto& [id, count] : tally.busy) {
      parts.push_back(absl::StrCat(count, " busy with ", id));
    }
    if (tally.draining > 0) {
      parts.push_back(absl::StrCat(tally.draining, " finishing an ended attempt"));
    }
    if (tally.lost > 0) parts.push_back(absl::StrCat(tally.lost, " lost"));
    if (tally.of_kind > fitting) {
      parts.push_back(absl::StrCat(tally.of_kind - fitting, job.min_compute_capability > 0
                                                                ? " too small or too old"
                                                                : " too small"));
    }
  }
  if (!tally.away.empty()) {
    parts.push_back(
        absl::StrCat(tally.away.size(), " away (", absl::StrJoin(tally.away, "; "), ")"));
  }
  if (!parts.empty()) absl::StrAppend(&reason, "; ", absl::StrJoin(parts, ", "));
  if (behind != nullptr) {
    absl::StrAppend(&reason, "; behind ", behind->id, " (priority ", behind->priority,
                    "), which is ahead in the queue for ", behind->device_kind, " workers");
  }
  if (idle == 0 && tally.reserved == 0) {
    std::vector<std::string> others;
    for (const auto& [kind, count] : tally.idle_other_kinds) {
      if (count > 0) others.push_back(Workers(count, kind));
    }
    if (!others.empty()) {
      absl::StrAppend(&reason, "; idle now: ", absl::StrJoin(others, ", "), ", 0 ",
                      job.device_kind);
    }
  }
  return reason;
}

}  // namespace

Schedule ScheduleGangs(std::vector<SchedulableJob> waiting, const std::vector<FleetWorker>& fleet,
                       const std::vector<RunningJob>& running) {
  std::stable_sort(waiting.begin(), waiting.end(),
                   [](const SchedulableJob& a, const SchedulableJob& b) {
                     return Ahead(a.priority, a.submit_order, b.priority, b.submit_order);
                   });
  Schedule schedule;
  std::set<std::string> taken;  // idle workers placed or reserved in this pass
  std::map<std::string, const SchedulableJob*> head_of;  // device kind → the head job
  // Tallies by shape, valid until `taken` next changes (then cleared).
  std::map<std::tuple<std::string, int64_t, int>, ShapeTally> tallies;
  auto tally_of = [&](const SchedulableJob& job) -> const ShapeTally& {
    const std::tuple<std::string, int64_t, int> shape{job.device_kind, job.rank_memory_bytes,
                                                      job.min_compute_capability};
    auto found = tallies.find(shape);
    if (found == tallies.end()) found = tallies.emplace(shape, TallyShape(job, fleet, taken)).first;
    return found->second;
  };
  auto take = [&](const std::vector<std::string>& ids) {
    taken.insert(ids.begin(), ids.end());
    tallies.clear();
  };
  for (const SchedulableJob& job : waiting) {
    if (job.world_size < 1) continue;
    const ShapeTally& tally = tally_of(job);
    if (static_cast<int>(tally.fitting.size()) < job.world_size) {
      schedule.holds.push_back({job.id, WaitReason(job, tally, nullptr)});
      continue;
    }
    if (tally.fitting_sharing < job.world_size) {
      schedule.holds.push_back({job.id, RootHoldReason(job, static_cast<int>(tally.fitting.size()),
                                                       tally.roots, tally.fitting_sharing)});
      continue;
    }
    const auto head = head_of.find(job.device_kind);
    // Fewer idle workers than ranks: no group of them sharing a root can be large enough.
    std::vector<const FleetWorker*> idle;
    if (static_cast<int>(tally.idle.size()) >= job.world_size || head == head_of.end()) {
      idle = SharingOneRoot(tally.idle);
    }
    if (static_cast<int>(idle.size()) >= job.world_size) {
      Placement placement;
      placement.job_id = job.id;
      placement.worker_ids = PackOntoHosts(idle, job.world_size);
      if (head != head_of.end()) {
        placement.backfilled = true;
        placement.ahead_of = head->second->id;
      }
      take(placement.worker_ids);
      schedule.placements.push_back(std::move(placement));
      continue;
    }
    if (head != head_of.end()) {  // waits behind the head; may still backfill later
      schedule.waits.push_back({job.id, WaitReason(job, tally, head->second)});
      continue;
    }
    head_of[job.device_kind] = &job;
    schedule.waits.push_back({job.id, WaitReason(job, tally, nullptr)});
    const int need = job.world_size - static_cast<int>(idle.size()) - tally.draining;
    std::vector<std::string> victims;
    if (need > 0) {
      victims = ChooseVictims(job, need, fleet, running);
      if (victims.empty()) continue;  // waits for jobs that were not lent workers; reserves none
    }
    std::vector<std::string> reserved;
    for (const FleetWorker* worker : idle) reserved.push_back(worker->id);
    take(reserved);
    for (const std::string& victim : victims) schedule.preemptions.push_back({victim, job.id});
  }
  return schedule;
}

}  // namespace fsdpd::server
