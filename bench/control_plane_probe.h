// The measuring side of the control-plane load benchmark: the coordinator as a child process,
// its /proc figures, latency samples, a /metrics scrape, and the count of what it stored.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace fsdpd::bench {

// The fsdpd flags a fleet of `workers` simulated workers needs: every one registers from
// 127.0.0.1 within a few seconds, and the defaults (4096 workers, 20 a second per peer) refuse
// fleets above them.
std::vector<std::string> RegistrationBoundsFor(int workers);

// One fsdpd started with a fresh state directory; its stderr goes to <state_dir>/fsdpd.log.
class CoordinatorProcess {
 public:
  ~CoordinatorProcess();
  // Serves gRPC and /metrics on 127.0.0.1, on ports of the system's choice (read back from
  // fsdpd's output). `extra_args` follow fsdpd's own flags (--listen, --metrics-listen,
  // --state-dir).
  absl::Status Start(const std::string& binary, const std::string& state_dir,
                     const std::vector<std::string>& extra_args = {});
  // SIGTERM, then waits for the exit (the job store flushes its batches on the way out).
  absl::Status Stop(std::chrono::seconds timeout);
  pid_t pid() const { return pid_; }
  int grpc_port() const { return grpc_port_; }
  int metrics_port() const { return metrics_port_; }

 private:
  pid_t pid_ = -1;
  int grpc_port_ = 0;
  int metrics_port_ = 0;
};

struct ProcessSample {
  int64_t rss_bytes = 0;
  double cpu_seconds = 0;  // utime + stime
  // Summed over threads: time spent runnable but waiting for a core (schedstat), which
  // separates "the coordinator is slow" from "the host gave it no CPU".
  double run_queue_seconds = 0;
  int threads = 0;
};
absl::StatusOr<ProcessSample> SampleProcess(pid_t pid);

// Milliseconds; percentiles by nearest rank.
struct LatencySummary {
  size_t count = 0;
  double p50 = 0;
  double p99 = 0;
  double max = 0;
};
LatencySummary Summarize(std::vector<double> millis);

// GET http://127.0.0.1:<port>/metrics; returns the body size, or the failure.
absl::StatusOr<size_t> ScrapeMetrics(int port);

// Rows per (job, attempt, rank) in step_reports, and rows per job in step_events, read from
// the coordinator's database after it stopped.
struct StoredSteps {
  std::map<std::tuple<std::string, int, int>, int64_t> rank_reports;
  std::map<std::string, int64_t> job_events;
};
absl::StatusOr<StoredSteps> ReadStoredSteps(const std::string& database_path);

}  // namespace fsdpd::bench
