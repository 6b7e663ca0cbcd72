// Gang scheduling as pure logic: given the jobs waiting to run, the registered fleet and the jobs
// running on it, decide which jobs start now and on which workers, which waiting jobs no fleet
// of this size could run (held, with the reason), and which backfilled jobs give their workers
// back to the job at the head of the queue. No I/O and no clock, so every rule is unit-tested
// alone.
//
// The policy (docs/architecture.md, "Scheduling"). fsdpd knows no job's run time, so it cannot
// backfill the way Slurm does (a small job starts only if it ends before the head job's
// reserved start). It borrows instead, as Kueue does, and takes back what it lent:
// - The queue is ordered by priority (higher first), then submit order. A job gets world_size
//   workers of its device kind, each with at least the memory one rank needs, all at once or
//   none.
// - Held: a job that the whole registered fleet could not run (every worker the coordinator
//   knows counts: idle, busy, reconnecting, and LOST until it is forgotten, since a lost worker
//   usually comes back), for want of workers of its kind or of workers with enough memory, is
//   held with a reason and blocks nobody. It is considered again on every pass, so it starts
//   once enough workers register.
// - The head of a device kind is the first job in queue order that the fleet could run but
//   that cannot start now. Every later job of that kind may start on idle workers the head is
//   not waiting for (backfill). Such a job is marked backfilled.
// - When the head could start on its idle workers plus the workers that are draining (their
//   attempt ended; they report back soon) plus those of running backfilled jobs behind it in
//   queue order, it reserves its idle workers (nobody backfills onto them) and, if the draining
//   ones are not enough, preempts backfilled jobs: lowest priority first, among equals the
//   most recently started, then spares any that the head does not need. A preempted job goes
//   back to PENDING and resumes from its last checkpoint without spending a restart.
// - A head that could not start even so waits for jobs that are not backfilled to end; until
//   then it reserves nothing, and idle workers are lent out.
// - A job's ranks must see each other's checkpoint files: its workers all report one
//   checkpoint root identity. A job that no group of workers sharing a root could run is held
//   with that reason; otherwise it is placed within the largest such group of idle workers.
// - Every waiting job that does not start says why (WaitReason in scheduler.cc, the one place
//   that words it): the fleet has too few workers of its kind, or with enough memory and a new
//   enough GPU (held), the workers are busy with named jobs, finishing, away or lost, or it
//   waits behind the head of its kind.
// - Ranks are packed onto as few hosts as possible: hosts with the most usable idle workers
//   first; ranks follow that host order, then gpu_index within a host.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fsdpd::server {

struct SchedulableJob {
  std::string id;
  int priority = 0;          // higher runs first
  int64_t submit_order = 0;  // FIFO within one priority
  std::string device_kind;   // cpu | cuda
  int world_size = 1;
  int64_t rank_memory_bytes = 0;  // what one rank needs (0: fits any worker)
  // The oldest GPU it runs on, major · 10 + minor (89 for FP8 matmuls; 0: any).
  int min_compute_capability = 0;
};

// A worker the coordinator knows.
struct FleetWorker {
  enum class State {
    kIdle,      // may take a rank now
    kAway,      // idle but without a session: counts for the fleet, takes nothing yet
    kLost,      // LOST and not yet forgotten: counts for the fleet, takes nothing
    kRunning,   // runs a rank of `job_id`'s current attempt
    kDraining,  // still runs a rank of an attempt that ended; free once it reports
  };
  std::string id;
  std::string hostname;
  std::string device_kind;
  int gpu_index = 0;
  int64_t memory_bytes = 0;  // what the coordinator admits (0: unknown, fits any job)
  // major · 10 + minor as registered (0: not said; fits any job, and the worker refuses a job
  // its GPU cannot run when it starts it).
  int compute_capability = 0;
  State state = State::kIdle;
  std::string job_id;  // kRunning
  int rank = -1;       // kRunning: the rank of job_id it was assigned
  // The identity of the checkpoint root the worker sees (WorkerHealth.checkpoint_root_id).
  // A job's ranks go only to workers of one identity; empty counts as one identity of its own.
  std::string root_id;
  // kAway: why it takes nothing ("no session", "cannot write its checkpoint root (...)").
  std::string away_reason;
};

// A job with a running attempt.
struct RunningJob {
  std::string id;
  int priority = 0;
  int64_t submit_order = 0;
  std::string device_kind;
  int64_t start_order = 0;  // larger: started more recently
  bool backfilled = false;  // started ahead of a waiting head job: preemptible by it
};

struct Placement {
  std::string job_id;
  std::vector<std::string> worker_ids;  // worker_ids[rank]
  // Started ahead of `ahead_of`, the head job of its kind, which was waiting.
  bool backfilled = false;
  std::string ahead_of;
};

struct Hold {
  std::string job_id;
  std::string reason;  // "held: needs 1000 cpu workers; the fleet has 2 registered"
};

struct Preemption {
  std::string job_id;  // the backfilled job that gives its workers back
  std::string for_job_id;
};

struct Schedule {
  std::vector<Placement> placements;  // in queue order
  std::vector<Hold> holds;  // the fleet could not run them (reasons start with kHeldPrefix)
  // The fleet could run them, but they do not start now (reasons start with kWaitingPrefix).
  std::vector<Hold> waits;
  std::vector<Preemption> preemptions;
};

// Every waiting job the fleet could not run starts with this in its hold reason.
inline constexpr char kHeldPrefix[] = "held: ";
// Every other waiting job's reason starts with this.
inline constexpr char kWaitingPrefix[] = "waiting for ";

// The rules above. `waiting` are the PENDING and RETRYING jobs; `fleet` every worker the
// coordinator knows; `running` the jobs with an attempt in progress.
Schedule ScheduleGangs(std::vector<SchedulableJob> waiting, const std::vector<FleetWorker>& fleet,
                       const std::vector<RunningJob>& running = {});

}  // namespace fsdpd::server
