// Workers' health as they report it (WorkerHealth): recorded for the scheduler, which keeps jobs
// off a worker that is unhealthy or cannot write its checkpoint root. The jobs that wait because
// of it say so through the scheduler's WaitReason (FleetLocked names why such a worker is away).
#include "absl/strings/str_cat.h"
#include "server/job_manager.h"
#include "spdlog/spdlog.h"

namespace fsdpd::server {

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

}  // namespace fsdpd::server
