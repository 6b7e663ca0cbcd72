// The coordinator's Prometheus series (DESIGN.md "Interfaces users touch"), served on
// --metrics-listen at /metrics. Training figures arrive through JobObserver; job and worker
// counts are read from their owners at scrape time so they can never drift.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
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
  // Registers itself as the job manager's observer; unregisters on destruction.
  static absl::StatusOr<std::unique_ptr<MetricsExporter>> Create(const MetricsConfig& config,
                                                                 JobManager& jobs,
                                                                 WorkerRegistry& workers);
  ~MetricsExporter() override;

  // One finished RPC: fsdpd_rpc_requests_total{method, code}.
  void CountRpc(const std::string& method, int grpc_code);
  // The text exposition format, as /metrics serves it.
  std::string Render() const;
  // The bound port of the HTTP endpoint (0 when there is none).
  int port() const;

  void OnRankStep(const v1::StepReport& report, const v1::Worker& worker) override;
  void OnAggregateStep(const v1::StepReport& aggregate) override;
  void OnJobFinished(const std::string& job_id) override;
  void OnProfile(const v1::ProfileReport& report) override;

 private:
  MetricsExporter(JobManager& jobs, WorkerRegistry& workers);

  JobManager& jobs_;
  WorkerRegistry& workers_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<prometheus::Collectable> state_counts_;
  prometheus::Family<prometheus::Gauge>& train_loss_;
  prometheus::Family<prometheus::Gauge>& train_step_;
  prometheus::Family<prometheus::Gauge>& train_tokens_per_second_;
  prometheus::Family<prometheus::Gauge>& train_mfu_;
  prometheus::Histogram& step_duration_;
  prometheus::Family<prometheus::Gauge>& memory_peak_;
  prometheus::Family<prometheus::Counter>& comm_exposed_;
  prometheus::Family<prometheus::Counter>& rpc_requests_;
  prometheus::Family<prometheus::Counter>& kernel_seconds_;
  prometheus::Family<prometheus::Gauge>& kernel_sm_ratio_;
  prometheus::Family<prometheus::Gauge>& kernel_dram_ratio_;
  std::unique_ptr<prometheus::Exposer> exposer_;
};

}  // namespace fsdpd::server
