// Gang scheduling as pure logic: given the jobs waiting to run and the idle workers, decide which
// jobs start now and on which workers. No I/O and no clock, so every rule is unit-tested alone.
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
};

struct IdleWorker {
  std::string id;
  std::string hostname;
  std::string device_kind;
  int gpu_index = 0;
  // False when the worker cannot write its checkpoint root, where every job writes (its folder,
  // checkpoints, rank 0's exported model): no rank is placed on it.
  bool can_checkpoint = true;
};

struct Placement {
  std::string job_id;
  std::vector<std::string> worker_ids;  // worker_ids[rank]
};

// Rules:
// - A job gets world_size workers of its device kind all at once, or none.
// - A worker that cannot checkpoint (can_checkpoint false) gets no rank.
// - Jobs are considered by priority (higher first), then by submit order.
// - A job that cannot be placed blocks every later job of the same device kind, so a large
//   job is never starved by a stream of small ones behind it.
// - Ranks are packed onto as few hosts as possible: hosts with the most idle matching workers
//   first; ranks follow that host order, then gpu_index within a host.
std::vector<Placement> ScheduleGangs(std::vector<SchedulableJob> jobs,
                                     std::vector<IdleWorker> idle_workers);

}  // namespace fsdpd::server
