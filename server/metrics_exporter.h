// The coordinator's Prometheus series (README.md "Metrics"), served on
// --metrics-listen at /metrics. Training figures arrive through JobObserver; job and worker
// counts are read from their owners at scrape time so they can never drift.
//
// fsdpd_job_info{job, name} exists for every job from its first scrape while it is active (or
// from its end, for a job that ends between two scrapes), so dashboards can list jobs that
// fail before their first step. fsdpd_worker_state{worker, hostname, device, state} is one
// series per known worker, read from the registry at scrape time.
//
// Per-job series (info, loss, step, throughput, MFU, step duration, memory peak, exposed
// communication, kernel families) are tracked per job and removed once the job has been
// finished for the configured retention. Expiry is checked on every scrape and every report,
// so a removed series never reaches Prometheus and memory stays bounded by live jobs.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "grpcpp/support/server_interceptor.h"
#include "prometheus/counter.h"
#include "prometheus/exposer.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "server/config.h"
#include "server/job_manager.h"
#include "server/worker_registry.h"

namespace fsdpd::server {

class MetricsExporter : public JobObserver {
 public:
  using Clock = std::chrono::steady_clock;

  // Registers itself as the job manager's observer; unregisters on destruction. `now` drives
  // the retention of finished jobs' series (tests pass a fake clock).
  static absl::StatusOr<std::unique_ptr<MetricsExporter>> Create(
      const MetricsConfig& config, JobManager& jobs, WorkerRegistry& workers,
      std::function<Clock::time_point()> now = Clock::now);
  ~MetricsExporter() override;

  // One finished RPC: fsdpd_rpc_requests_total{method, code}.
  void CountRpc(const std::string& method, int grpc_code);
  // RPC latency, from a call's arrival: fsdpd_rpc_duration_seconds{method} to its status, and
  // for response streams fsdpd_rpc_first_message_seconds{method} to its first message. `method`
  // is gRPC's full name ("/fsdpd.v1.JobService/SubmitJob"); the label is its last part, as in
  // fsdpd_rpc_requests_total, and "unknown" for a method no fsdpd service defines, so clients
  // cannot grow the label set.
  void ObserveRpcDuration(const std::string& method, double seconds);
  void ObserveRpcFirstMessage(const std::string& method, double seconds);
  // For the coordinator's ServerBuilder (experimental().SetInterceptorCreators): times every
  // RPC into the two histograms above. The exporter must outlive the server.
  std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> RpcTimingInterceptors();
  // The text exposition format, as /metrics serves it (after dropping expired series).
  std::string Render();
  // Removes the series of jobs whose retention has passed.
  void RemoveExpiredSeries();
  // Adds fsdpd_job_info for the jobs that are active now (pending to running) and lack it.
  void TrackActiveJobs();
  // The bound port of the HTTP endpoint (0 when there is none).
  int port() const;

  void OnRankStep(const v1::StepReport& report, const v1::Worker& worker) override;
  void OnAggregateStep(const v1::StepReport& aggregate) override;
  void OnJobFinished(const std::string& job_id) override;
  void OnProfile(const v1::ProfileReport& report) override;

 private:
  // One rank's device series in its current attempt, so that a step report sets them without
  // building labels and looking them up (the hot path: every rank reports every step).
  struct RankSeries {
    int attempt = -1;
    prometheus::Gauge* memory_peak = nullptr;
    prometheus::Gauge* memory_reserved = nullptr;  // created on the first known reading
    prometheus::Gauge* memory_used = nullptr;      // created on the first known reading
    prometheus::Counter* comm_exposed = nullptr;   // created on the first exposed time
  };
  // A job's training series, set on every aggregated step.
  struct TrainSeries {
    prometheus::Gauge* loss = nullptr;  // the four gauges are created together
    prometheus::Gauge* step = nullptr;
    prometheus::Gauge* tokens_per_second = nullptr;
    prometheus::Gauge* mfu = nullptr;
    prometheus::Histogram* step_duration = nullptr;  // created on the first timed step
    prometheus::Gauge* eval_loss = nullptr;          // created on the first validated step
  };
  // Every series one job added, by family, so they can be removed together.
  struct JobSeries {
    std::set<std::pair<prometheus::Family<prometheus::Gauge>*, prometheus::Gauge*>> gauges;
    std::set<std::pair<prometheus::Family<prometheus::Counter>*, prometheus::Counter*>> counters;
    std::set<std::pair<prometheus::Family<prometheus::Histogram>*, prometheus::Histogram*>>
        histograms;
    // Shortcuts into the sets above.
    TrainSeries train;
    std::map<int, RankSeries> ranks;             // by rank
    std::optional<Clock::time_point> remove_at;  // set when the job finished
    bool has_info = false;                       // fsdpd_job_info is set
  };
  class PruningCollectable;

  MetricsExporter(JobManager& jobs, WorkerRegistry& workers, const MetricsConfig& config,
                  std::function<Clock::time_point()> now);
  // Add() on a family, remembering the series under its job. Callers hold series_mutex_ until
  // they are done with the returned metric, so expiry cannot free it underneath them.
  prometheus::Gauge& JobGauge(prometheus::Family<prometheus::Gauge>& family,
                              const prometheus::Labels& labels);
  prometheus::Counter& JobCounter(prometheus::Family<prometheus::Counter>& family,
                                  const prometheus::Labels& labels);
  prometheus::Histogram& JobHistogram(const prometheus::Labels& labels);
  void RemoveExpiredSeriesLocked();
  // Sets fsdpd_job_info{job, name} once per job.
  void AddJobInfoLocked(const v1::Job& job);
  static void RemoveSeries(JobSeries& series);

  JobManager& jobs_;
  WorkerRegistry& workers_;
  const std::chrono::milliseconds retention_;
  const std::function<Clock::time_point()> now_;
  std::mutex series_mutex_;
  std::map<std::string, JobSeries> series_by_job_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<prometheus::Collectable> pruning_registry_;
  std::shared_ptr<prometheus::Collectable> state_counts_;
  prometheus::Family<prometheus::Gauge>& job_info_;
  prometheus::Family<prometheus::Gauge>& train_loss_;
  prometheus::Family<prometheus::Gauge>& eval_loss_;
  prometheus::Family<prometheus::Gauge>& train_step_;
  prometheus::Family<prometheus::Gauge>& train_tokens_per_second_;
  prometheus::Family<prometheus::Gauge>& train_mfu_;
  prometheus::Family<prometheus::Histogram>& step_duration_;
  prometheus::Family<prometheus::Gauge>& memory_peak_;
  prometheus::Family<prometheus::Gauge>& memory_reserved_;
  prometheus::Family<prometheus::Gauge>& memory_used_;
  prometheus::Family<prometheus::Counter>& comm_exposed_;
  prometheus::Family<prometheus::Counter>& rpc_requests_;
  prometheus::Family<prometheus::Histogram>& rpc_duration_;
  prometheus::Family<prometheus::Histogram>& rpc_first_message_;
  prometheus::Family<prometheus::Counter>& kernel_seconds_;
  prometheus::Family<prometheus::Gauge>& kernel_sm_ratio_;
  prometheus::Family<prometheus::Gauge>& kernel_dram_ratio_;
  std::unique_ptr<prometheus::Exposer> exposer_;
};

}  // namespace fsdpd::server
