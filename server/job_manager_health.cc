// Workers' health as they report it (WorkerHealth): recorded for the scheduler, which keeps jobs
// off a worker that is unhealthy or cannot write its checkpoint root, and explained to the jobs
// that wait because of it.
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/job_manager.h"
#include "spdlog/spdlog.h"

namespace fsdpd::server {
namespace {

constexpr char kWaitingPrefix[] = "waiting: ";

}  // namespace

void JobManager::OnWorkerHealthLocked(const std::string& worker_id,
                                      const v1::WorkerHealth& health) {
  if (!workers_.SetHealth(worker_id, health)) return;
  if (!health.unhealthy().empty()) {
    spdlog::error("worker {} reports itself unhealthy and gets no more jobs: {}", worker_id,
                  health.unhealthy());
    // It is about to exit: an attempt it still holds fails now rather than when it falls
    // silent (usually that attempt was cancelled already, which is how the worker found out).
    const std::optional<WorkerSnapshot> worker = workers_.Find(worker_id);
    if (worker.has_value() && worker->assignment.active()) {
      const RankAssignment& held = worker->assignment;
      if (JobRecord* record =
              ActiveRecordForLocked(worker_id, held.job_id, held.attempt, held.rank)) {
        FailAttemptLocked(*record, absl::StrCat("worker ", worker_id,
                                                " reports itself unhealthy: ", health.unhealthy()));
      }
    }
  } else if (!health.checkpoint_root_error().empty()) {
    spdlog::warn("worker {} gets no jobs: {}", worker_id, health.checkpoint_root_error());
  } else {
    spdlog::info("worker {} reports itself fit for jobs again", worker_id);
  }
}

void JobManager::ExplainWaitingLocked() {
  const std::vector<IdleWorker> idle = workers_.IdleWorkers();
  for (auto& [id, record] : jobs_) {
    v1::Job& job = record.job;
    if (job.state() != v1::PENDING && job.state() != v1::RETRYING) continue;
    const v1::ParallelSpec& parallel = job.spec().parallel();
    int able = 0;
    std::vector<std::string> unable;
    std::string why_unable;
    for (const IdleWorker& worker : idle) {
      if (worker.device_kind != parallel.device()) continue;
      if (worker.can_checkpoint) {
        ++able;
        continue;
      }
      unable.push_back(worker.id);
      if (why_unable.empty()) {
        if (std::optional<WorkerSnapshot> found = workers_.Find(worker.id)) {
          why_unable = found->info.health().checkpoint_root_error();
        }
      }
    }
    std::string reason;
    if (!unable.empty() && able < parallel.world_size()) {
      reason = absl::StrCat(kWaitingPrefix, able, " idle ", parallel.device(),
                            " worker(s) can take a rank; ", absl::StrJoin(unable, ", "),
                            " cannot write its checkpoint root, where every job writes (",
                            why_unable, ")");
    } else if (absl::StartsWith(job.reason(), kWaitingPrefix) && job.transitions_size() > 0) {
      // No longer so: back to what the last transition said.
      reason = job.transitions(job.transitions_size() - 1).reason();
    } else {
      continue;
    }
    if (job.reason() == reason) continue;
    job.set_reason(reason);
    PublishLocked(record);
  }
}

}  // namespace fsdpd::server
