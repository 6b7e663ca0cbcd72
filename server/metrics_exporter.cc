#include "server/metrics_exporter.h"

#include <algorithm>
#include <map>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "fsdpd/v1/common.pb.h"
#include "google/protobuf/descriptor.h"
#include "grpcpp/support/status_code_enum.h"
#include "prometheus/collectable.h"
#include "prometheus/text_serializer.h"
#include "server/grpc_util.h"
#include "server/metrics_endpoint.h"

namespace fsdpd::server {
namespace {

// fsdpd_jobs{state} and fsdpd_workers{state}, counted when Prometheus scrapes.
class StateCounts : public prometheus::Collectable {
 public:
  StateCounts(JobManager& jobs, WorkerRegistry& workers) : jobs_(jobs), workers_(workers) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    prometheus::MetricFamily job_family{
        "fsdpd_jobs", "Jobs by state.", prometheus::MetricType::Gauge, {}};
    const std::map<v1::JobState, int> job_counts = jobs_.CountByState();
    for (int state = v1::PENDING; state <= v1::RETRYING; ++state) {
      auto found = job_counts.find(static_cast<v1::JobState>(state));
      job_family.metric.push_back(Gauge("state",
                                        v1::JobState_Name(static_cast<v1::JobState>(state)),
                                        found == job_counts.end() ? 0 : found->second));
    }
    prometheus::MetricFamily worker_family{
        "fsdpd_workers", "Workers by state.", prometheus::MetricType::Gauge, {}};
    const std::map<v1::WorkerState, int> worker_counts = workers_.CountByState();
    for (int state = v1::IDLE; state <= v1::DRAINING; ++state) {
      auto found = worker_counts.find(static_cast<v1::WorkerState>(state));
      worker_family.metric.push_back(
          Gauge("state", v1::WorkerState_Name(static_cast<v1::WorkerState>(state)),
                found == worker_counts.end() ? 0 : found->second));
    }
    // One series per worker, so an alert can name the host and device of a lost one and see
    // when a live worker is back on that device.
    prometheus::MetricFamily worker_state{
        "fsdpd_worker_state",
        "1 for each worker the coordinator knows, labelled by its current state and its host "
        "and device (cpu, cuda:N).",
        prometheus::MetricType::Gauge,
        {}};
    for (const v1::Worker& worker : workers_.List()) {
      prometheus::ClientMetric metric;
      // In name order, as the registry's own series are.
      metric.label = {
          {"device", worker.device_kind() == "cuda" ? absl::StrCat("cuda:", worker.gpu_index())
                                                    : worker.device_kind()},
          {"hostname", worker.hostname()},
          {"state", v1::WorkerState_Name(worker.state())},
          {"worker", worker.id()}};
      metric.gauge.value = 1;
      worker_state.metric.push_back(std::move(metric));
    }
    const JobManager::StoreHealth store = jobs_.GetStoreHealth();
    prometheus::MetricFamily store_errors{
        "fsdpd_store_errors_total",
        "Job store writes that failed (a full disk, a read-only volume); while they fail the "
        "coordinator holds changes and refuses submits.",
        prometheus::MetricType::Counter,
        {}};
    store_errors.metric.push_back(Count(store.errors));
    prometheus::MetricFamily store_writable{
        "fsdpd_store_writable",
        "1 while the job store takes writes, 0 while it cannot.",
        prometheus::MetricType::Gauge,
        {}};
    prometheus::ClientMetric writable;
    writable.gauge.value = store.writable ? 1 : 0;
    store_writable.metric.push_back(writable);
    prometheus::MetricFamily held{"fsdpd_store_held_messages",
                                  "Worker messages held until the job store writes again.",
                                  prometheus::MetricType::Gauge,
                                  {}};
    prometheus::ClientMetric held_count;
    held_count.gauge.value = static_cast<double>(store.held_messages);
    held.metric.push_back(held_count);
    const JobManager::LivenessHealth liveness = jobs_.GetLivenessHealth();
    prometheus::MetricFamily lag{
        "fsdpd_processing_lag_seconds",
        "How far behind the coordinator is in handling its workers' messages (the oldest "
        "waiting message's age, or the latest stall), at the latest tick.",
        prometheus::MetricType::Gauge,
        {}};
    lag.metric.push_back(Value(static_cast<double>(liveness.lag_millis) / 1000));
    prometheus::MetricFamily suspended{
        "fsdpd_lost_worker_decisions_suspended",
        "1 while the coordinator declares no worker lost on silence alone: it lags behind its "
        "workers, or too much of the fleet went silent at once (docs/operations.md Overload).",
        prometheus::MetricType::Gauge,
        {}};
    suspended.metric.push_back(Value(liveness.suspended ? 1 : 0));
    prometheus::MetricFamily suspensions{
        "fsdpd_lost_worker_decisions_suspensions_total",
        "Times the coordinator suspended its lost-worker decisions.",
        prometheus::MetricType::Counter,
        {}};
    suspensions.metric.push_back(Count(liveness.suspensions));
    prometheus::MetricFamily held_silent{
        "fsdpd_silent_workers_held",
        "Workers silent past the heartbeat timeout that the mass-silence rule keeps from being "
        "declared lost.",
        prometheus::MetricType::Gauge,
        {}};
    held_silent.metric.push_back(Value(liveness.held_workers));
    prometheus::MetricFamily paced{
        "fsdpd_report_pacing_interval_seconds",
        "The interval workers are told to beat at and send their step reports with (0: not "
        "paced): the coordinator's backpressure while it lags (docs/operations.md Overload).",
        prometheus::MetricType::Gauge,
        {}};
    paced.metric.push_back(Value(static_cast<double>(liveness.paced_interval_millis) / 1000));
    prometheus::MetricFamily pacings{"fsdpd_report_pacings_total",
                                     "Times the coordinator started pacing its workers' reports.",
                                     prometheus::MetricType::Counter,
                                     {}};
    pacings.metric.push_back(Count(liveness.pacings));
    return {job_family, worker_family, worker_state, store_errors, store_writable, held,
            lag,        suspended,     suspensions,  held_silent,  paced,          pacings};
  }

 private:
  static prometheus::ClientMetric Value(double value) {
    prometheus::ClientMetric metric;
    metric.gauge.value = value;
    return metric;
  }
  static prometheus::ClientMetric Count(int64_t count) {
    prometheus::ClientMetric metric;
    metric.counter.value = static_cast<double>(count);
    return metric;
  }
  static prometheus::ClientMetric Gauge(const std::string& label, const std::string& value,
                                        double count) {
    prometheus::ClientMetric metric;
    metric.label.push_back({label, value});
    metric.gauge.value = count;
    return metric;
  }
  JobManager& jobs_;
  WorkerRegistry& workers_;
};

// From a millisecond (a key-value Get) to minutes (a log follow or a session stream).
prometheus::Histogram::BucketBoundaries RpcBuckets() {
  return {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
          0.5,    1,     2.5,    5,     10,   30,    60,   300, 3600};
}

// "/fsdpd.v1.JobService/SubmitJob" → "SubmitJob" when the generated descriptors know the
// method, else "unknown": the label set stays the services' methods whatever clients send.
std::string RpcMethodLabel(const std::string& full_name) {
  const size_t slash = full_name.rfind('/');
  if (full_name.size() < 2 || full_name[0] != '/' || slash == 0 || slash == std::string::npos) {
    return "unknown";
  }
  const std::string service = full_name.substr(1, slash - 1);
  const std::string method = full_name.substr(slash + 1);
  const google::protobuf::ServiceDescriptor* descriptor =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(service);
  if (descriptor == nullptr || descriptor->FindMethodByName(method) == nullptr) return "unknown";
  return method;
}

const char* CodeName(int code) {
  static const char* const kNames[] = {"OK",
                                       "CANCELLED",
                                       "UNKNOWN",
                                       "INVALID_ARGUMENT",
                                       "DEADLINE_EXCEEDED",
                                       "NOT_FOUND",
                                       "ALREADY_EXISTS",
                                       "PERMISSION_DENIED",
                                       "RESOURCE_EXHAUSTED",
                                       "FAILED_PRECONDITION",
                                       "ABORTED",
                                       "OUT_OF_RANGE",
                                       "UNIMPLEMENTED",
                                       "INTERNAL",
                                       "UNAVAILABLE",
                                       "DATA_LOSS",
                                       "UNAUTHENTICATED"};
  return code >= 0 && code <= 16 ? kNames[code] : "UNKNOWN";
}

}  // namespace

// What the HTTP endpoint collects: the registry, after expired series are removed, so a
// scrape never shows a finished job past its retention.
class MetricsExporter::PruningCollectable : public prometheus::Collectable {
 public:
  explicit PruningCollectable(MetricsExporter& exporter) : exporter_(exporter) {}
  std::vector<prometheus::MetricFamily> Collect() const override {
    exporter_.RemoveExpiredSeries();
    exporter_.TrackActiveJobs();
    return exporter_.registry_->Collect();
  }

 private:
  MetricsExporter& exporter_;
};

MetricsExporter::MetricsExporter(JobManager& jobs, WorkerRegistry& workers,
                                 const MetricsConfig& config,
                                 std::function<Clock::time_point()> now)
    : jobs_(jobs),
      workers_(workers),
      retention_(config.retention),
      now_(std::move(now)),
      registry_(std::make_shared<prometheus::Registry>()),
      pruning_registry_(std::make_shared<PruningCollectable>(*this)),
      state_counts_(std::make_shared<StateCounts>(jobs, workers)),
      job_info_(prometheus::BuildGauge()
                    .Name("fsdpd_job_info")
                    .Help("1 for every job, from submission (its first scrape) until the "
                          "retention after it ended; labels: job id and spec name.")
                    .Register(*registry_)),
      train_loss_(prometheus::BuildGauge()
                      .Name("fsdpd_train_loss")
                      .Help("Training loss of the latest step (rank 0's global mean).")
                      .Register(*registry_)),
      eval_loss_(prometheus::BuildGauge()
                     .Name("fsdpd_job_eval_loss")
                     .Help("Validation loss of the latest validated step (data.eval_every): the "
                           "mean over data.eval_batches held-out batches on every rank.")
                     .Register(*registry_)),
      train_step_(prometheus::BuildGauge()
                      .Name("fsdpd_train_step")
                      .Help("Latest step every rank finished.")
                      .Register(*registry_)),
      train_tokens_per_second_(prometheus::BuildGauge()
                                   .Name("fsdpd_train_tokens_per_second")
                                   .Help("Training throughput summed over ranks.")
                                   .Register(*registry_)),
      train_mfu_(prometheus::BuildGauge()
                     .Name("fsdpd_train_mfu_ratio")
                     .Help("Model FLOPs utilisation (0 to 1), mean over ranks.")
                     .Register(*registry_)),
      step_duration_(prometheus::BuildHistogram()
                         .Name("fsdpd_train_step_duration_seconds")
                         .Help("Wall time of one training step (slowest rank).")
                         .Register(*registry_)),
      memory_peak_(prometheus::BuildGauge()
                       .Name("fsdpd_gpu_memory_peak_bytes")
                       .Help("Peak device memory of one rank.")
                       .Register(*registry_)),
      memory_reserved_(prometheus::BuildGauge()
                           .Name("fsdpd_gpu_memory_reserved_bytes")
                           .Help("Device memory one rank's allocator holds: in use plus its cache "
                                 "(reserved minus in use is the cache and its fragmentation).")
                           .Register(*registry_)),
      memory_used_(prometheus::BuildGauge()
                       .Name("fsdpd_gpu_memory_used_bytes")
                       .Help("Memory of one rank as the driver sees it (context, libraries and "
                             "NCCL included; on a CPU rank its resident set).")
                       .Register(*registry_)),
      comm_exposed_(prometheus::BuildCounter()
                        .Name("fsdpd_comm_exposed_seconds_total")
                        .Help("Communication time not hidden behind compute, all collectives "
                              "together.")
                        .Register(*registry_)),
      rpc_requests_(prometheus::BuildCounter()
                        .Name("fsdpd_rpc_requests_total")
                        .Help("Finished gRPC requests by method and status code.")
                        .Register(*registry_)),
      rpc_duration_(prometheus::BuildHistogram()
                        .Name("fsdpd_rpc_duration_seconds")
                        .Help("gRPC latency from a call's arrival to its status, by method "
                              "(streams: their whole life).")
                        .Register(*registry_)),
      rpc_first_message_(prometheus::BuildHistogram()
                             .Name("fsdpd_rpc_first_message_seconds")
                             .Help("Response streams: from a call's arrival to its first "
                                   "message, by method.")
                             .Register(*registry_)),
      kernel_seconds_(prometheus::BuildCounter()
                          .Name("fsdpd_kernel_gpu_seconds_total")
                          .Help("Kernel time in profiling windows, summed over ranks.")
                          .Register(*registry_)),
      kernel_sm_ratio_(prometheus::BuildGauge()
                           .Name("fsdpd_kernel_sm_throughput_ratio")
                           .Help("SM throughput of a kernel as a fraction of peak (rank 0).")
                           .Register(*registry_)),
      kernel_dram_ratio_(prometheus::BuildGauge()
                             .Name("fsdpd_kernel_dram_throughput_ratio")
                             .Help("DRAM throughput of a kernel as a fraction of peak (rank 0).")
                             .Register(*registry_)) {}

absl::StatusOr<std::unique_ptr<MetricsExporter>> MetricsExporter::Create(
    const MetricsConfig& config, JobManager& jobs, WorkerRegistry& workers,
    std::function<Clock::time_point()> now) {
  if (absl::Status status = config.Check(); !status.ok()) return status;
  std::unique_ptr<MetricsExporter> exporter(
      new MetricsExporter(jobs, workers, config, std::move(now)));
  if (!config.listen.empty()) {
    absl::StatusOr<std::unique_ptr<prometheus::Exposer>> exposer =
        OpenMetricsEndpoint(config.listen);
    if (!exposer.ok()) return exposer.status();
    exporter->exposer_ = std::move(*exposer);
    exporter->exposer_->RegisterCollectable(exporter->pruning_registry_);
    exporter->exposer_->RegisterCollectable(exporter->state_counts_);
  }
  jobs.SetObserver(exporter.get());
  return exporter;
}

MetricsExporter::~MetricsExporter() {
  jobs_.SetObserver(nullptr);
  exposer_.reset();
}

int MetricsExporter::port() const {
  if (exposer_ == nullptr) return 0;
  std::vector<int> ports = exposer_->GetListeningPorts();
  return ports.empty() ? 0 : ports.front();
}

void MetricsExporter::CountRpc(const std::string& method, int grpc_code) {
  rpc_requests_.Add({{"method", method}, {"code", CodeName(grpc_code)}}).Increment();
}

void MetricsExporter::ObserveRpcDuration(const std::string& method, double seconds) {
  rpc_duration_.Add({{"method", RpcMethodLabel(method)}}, RpcBuckets()).Observe(seconds);
}

void MetricsExporter::ObserveRpcFirstMessage(const std::string& method, double seconds) {
  rpc_first_message_.Add({{"method", RpcMethodLabel(method)}}, RpcBuckets()).Observe(seconds);
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
MetricsExporter::RpcTimingInterceptors() {
  RpcTimingObserver observer;
  observer.on_end = [this](const char* method, bool /*streaming*/, double seconds) {
    ObserveRpcDuration(method, seconds);
  };
  observer.on_first_message = [this](const char* method, double seconds) {
    ObserveRpcFirstMessage(method, seconds);
  };
  return std::make_unique<RpcTimingInterceptorFactory>(std::move(observer));
}

prometheus::Gauge& MetricsExporter::JobGauge(prometheus::Family<prometheus::Gauge>& family,
                                             const prometheus::Labels& labels) {
  prometheus::Gauge& gauge = family.Add(labels);
  series_by_job_[labels.at("job")].gauges.emplace(&family, &gauge);
  return gauge;
}

prometheus::Counter& MetricsExporter::JobCounter(prometheus::Family<prometheus::Counter>& family,
                                                 const prometheus::Labels& labels) {
  prometheus::Counter& counter = family.Add(labels);
  series_by_job_[labels.at("job")].counters.emplace(&family, &counter);
  return counter;
}

prometheus::Histogram& MetricsExporter::JobHistogram(const prometheus::Labels& labels) {
  prometheus::Histogram& histogram =
      step_duration_.Add(labels, prometheus::Histogram::BucketBoundaries{
                                     0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60});
  series_by_job_[labels.at("job")].histograms.emplace(&step_duration_, &histogram);
  return histogram;
}

void MetricsExporter::RemoveSeries(JobSeries& series) {
  for (const auto& [family, gauge] : series.gauges) family->Remove(gauge);
  for (const auto& [family, counter] : series.counters) family->Remove(counter);
  for (const auto& [family, histogram] : series.histograms) family->Remove(histogram);
  series.gauges.clear();
  series.counters.clear();
  series.histograms.clear();
  series.ranks.clear();
  series.train = TrainSeries();
}

void MetricsExporter::RemoveExpiredSeries() {
  std::lock_guard<std::mutex> lock(series_mutex_);
  RemoveExpiredSeriesLocked();
}

void MetricsExporter::RemoveExpiredSeriesLocked() {
  const Clock::time_point now = now_();
  for (auto it = series_by_job_.begin(); it != series_by_job_.end();) {
    if (it->second.remove_at.has_value() && *it->second.remove_at <= now) {
      RemoveSeries(it->second);
      it = series_by_job_.erase(it);
    } else {
      ++it;
    }
  }
}

void MetricsExporter::TrackActiveJobs() {
  // Listed before taking series_mutex_: the job manager calls OnJobFinished with its own lock
  // held, so this side must not hold series_mutex_ while it asks the job manager.
  const std::vector<v1::Job> active =
      jobs_.List({v1::PENDING, v1::SCHEDULED, v1::RUNNING, v1::RETRYING}, /*limit=*/0);
  std::lock_guard<std::mutex> lock(series_mutex_);
  for (const v1::Job& job : active) {
    auto known = series_by_job_.find(job.id());
    if (known != series_by_job_.end() && known->second.has_info) continue;
    // Asked again under the lock: a job that ended since the listing has had (or will have,
    // after this lock) its OnJobFinished, which adds the series with its removal time. One
    // added here for an ended job would never be removed.
    absl::StatusOr<v1::Job> current = jobs_.Get(job.id());
    if (!current.ok() || current->finished_unix_millis() != 0) continue;
    AddJobInfoLocked(*current);
  }
}

void MetricsExporter::AddJobInfoLocked(const v1::Job& job) {
  JobSeries& series = series_by_job_[job.id()];
  if (series.has_info) return;
  JobGauge(job_info_, {{"job", job.id()}, {"name", job.spec().name()}}).Set(1);
  series.has_info = true;
}

std::string MetricsExporter::Render() {
  RemoveExpiredSeries();
  TrackActiveJobs();
  std::vector<prometheus::MetricFamily> families = registry_->Collect();
  for (prometheus::MetricFamily& family : state_counts_->Collect()) {
    families.push_back(std::move(family));
  }
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, families);
  return out.str();
}

void MetricsExporter::OnRankStep(const v1::StepReport& report, const v1::Worker& worker) {
  // Expired series are dropped on each scrape and when a job ends, not on this hot path.
  std::lock_guard<std::mutex> lock(series_mutex_);
  // A rank keeps its worker for the whole attempt, so its labels are built once per attempt.
  RankSeries& cached = series_by_job_[report.job_id()].ranks[report.rank()];
  if (cached.attempt != report.attempt()) {
    cached = RankSeries();
    cached.attempt = report.attempt();
  }
  const auto device = [&] {
    return prometheus::Labels{{"job", report.job_id()},
                              {"rank", absl::StrCat(report.rank())},
                              {"hostname", worker.hostname()},
                              {"gpu", absl::StrCat(worker.gpu_index())},
                              {"UUID", worker.gpu_uuid()}};
  };
  if (cached.memory_peak == nullptr) cached.memory_peak = &JobGauge(memory_peak_, device());
  cached.memory_peak->Set(static_cast<double>(report.memory_peak_bytes()));
  if (report.memory_reserved_bytes() > 0) {
    if (cached.memory_reserved == nullptr) {
      cached.memory_reserved = &JobGauge(memory_reserved_, device());
    }
    cached.memory_reserved->Set(static_cast<double>(report.memory_reserved_bytes()));
  }
  // 0 is "unknown" (a worker that does not measure it): no series rather than a false zero.
  if (report.memory_device_used_bytes() > 0) {
    if (cached.memory_used == nullptr) cached.memory_used = &JobGauge(memory_used_, device());
    cached.memory_used->Set(static_cast<double>(report.memory_device_used_bytes()));
  }
  if (report.exposed_comm_seconds() > 0) {
    if (cached.comm_exposed == nullptr) {
      // No `op` label: the communicator measures its blocked time over all collectives
      // together (host wait plus, on CUDA, the compute stream's waits on the comm stream),
      // not per collective, so a per-op split would be invented.
      cached.comm_exposed = &JobCounter(
          comm_exposed_, {{"job", report.job_id()}, {"rank", absl::StrCat(report.rank())}});
    }
    cached.comm_exposed->Increment(report.exposed_comm_seconds());
  }
}

void MetricsExporter::OnAggregateStep(const v1::StepReport& aggregate) {
  std::lock_guard<std::mutex> lock(series_mutex_);
  TrainSeries& cached = series_by_job_[aggregate.job_id()].train;
  if (cached.loss == nullptr) {
    const prometheus::Labels job{{"job", aggregate.job_id()}};
    cached.loss = &JobGauge(train_loss_, job);
    cached.step = &JobGauge(train_step_, job);
    cached.tokens_per_second = &JobGauge(train_tokens_per_second_, job);
    cached.mfu = &JobGauge(train_mfu_, job);
  }
  cached.loss->Set(aggregate.loss());
  cached.step->Set(static_cast<double>(aggregate.step()));
  cached.tokens_per_second->Set(aggregate.tokens_per_second());
  cached.mfu->Set(aggregate.mfu_ratio());
  if (aggregate.has_eval_loss()) {
    if (cached.eval_loss == nullptr) {
      cached.eval_loss = &JobGauge(eval_loss_, {{"job", aggregate.job_id()}});
    }
    cached.eval_loss->Set(aggregate.eval_loss());
  }
  if (aggregate.step_seconds() > 0) {
    if (cached.step_duration == nullptr) {
      cached.step_duration = &JobHistogram({{"job", aggregate.job_id()}});
    }
    cached.step_duration->Observe(aggregate.step_seconds());
  }
}

void MetricsExporter::OnJobFinished(const std::string& job_id) {
  // The last figures stay scrapeable for the retention, then go, so dashboards and the stall
  // alert can tell a finished job from a stalled one and label sets do not grow forever.
  // A job that ended between two scrapes still gets its info series, for the retention. The
  // job manager published the finished job before calling here, and its view has its own lock.
  absl::StatusOr<v1::Job> job = jobs_.Get(job_id);
  std::lock_guard<std::mutex> lock(series_mutex_);
  if (job.ok()) AddJobInfoLocked(*job);
  auto found = series_by_job_.find(job_id);
  if (found != series_by_job_.end()) found->second.remove_at = now_() + retention_;
  RemoveExpiredSeriesLocked();
}

void MetricsExporter::OnProfile(const v1::ProfileReport& report) {
  // Kernel labels stay bounded: the top kernels by time by name, the rest summed as "other".
  constexpr size_t kTopKernels = 10;
  std::map<std::string, double> seconds_by_name;
  std::map<std::string, const v1::KernelStat*> first_row;
  for (const v1::KernelStat& kernel : report.kernels()) {
    seconds_by_name[kernel.name()] += kernel.total_seconds();
    first_row.try_emplace(kernel.name(), &kernel);
  }
  std::lock_guard<std::mutex> lock(series_mutex_);
  RemoveExpiredSeriesLocked();
  std::vector<std::pair<double, std::string>> ranked;
  for (const auto& [name, seconds] : seconds_by_name) ranked.emplace_back(seconds, name);
  std::sort(ranked.rbegin(), ranked.rend());
  double other_seconds = 0;
  for (size_t i = 0; i < ranked.size(); ++i) {
    const auto& [seconds, name] = ranked[i];
    if (i >= kTopKernels) {
      other_seconds += seconds;
      continue;
    }
    const prometheus::Labels labels{{"job", report.job_id()}, {"kernel", name}};
    if (seconds > 0) JobCounter(kernel_seconds_, labels).Increment(seconds);
    const v1::KernelStat& row = *first_row.at(name);
    if (report.rank() == 0 && row.sm_throughput_ratio() >= 0) {
      JobGauge(kernel_sm_ratio_, labels).Set(row.sm_throughput_ratio());
    }
    if (report.rank() == 0 && row.dram_throughput_ratio() >= 0) {
      JobGauge(kernel_dram_ratio_, labels).Set(row.dram_throughput_ratio());
    }
  }
  if (other_seconds > 0) {
    JobCounter(kernel_seconds_, {{"job", report.job_id()}, {"kernel", "other"}})
        .Increment(other_seconds);
  }
}

}  // namespace fsdpd::server
