// The metrics exporter's per-job series: the step-duration histogram is labelled by job, and a
// finished job's series are removed once the retention passes (scrape text before and after).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <thread>

#include "fsdpd/v1/jobs.grpc.pb.h"
#include "fsdpd/v1/rendezvous.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "proto/spec/job_spec.h"
#include "server/job_manager.h"
#include "server/job_service.h"
#include "server/metrics_exporter.h"
#include "server/rendezvous_service.h"
#include "server/sqlite_job_store.h"
#include "tests/support/test_specs.h"

namespace fsdpd::server {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using Clock = std::chrono::steady_clock;

// A sample of the scrape ("name{labels} value"), or -1 when the series is absent.
double Sample(const std::string& scrape, const std::string& series) {
  const size_t at = scrape.find(series + " ");
  if (at == std::string::npos) return -1.0;
  return std::stod(scrape.substr(at + series.size() + 1));
}

class MetricsExporterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/fsdpd-metrics-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    directory_ = pattern;
    JobStoreConfig store_config;
    store_config.database_path = directory_ + "/fsdpd.db";
    absl::StatusOr<std::unique_ptr<SqliteJobStore>> store = SqliteJobStore::Open(store_config);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    registry_ = std::make_unique<WorkerRegistry>(WorkerRegistryConfig{});
    rendezvous_ = std::make_unique<RendezvousStore>(RendezvousConfig{});
    JobManagerConfig config;
    config.artifact_dir = directory_ + "/artifacts";
    jobs_ = std::make_unique<JobManager>(config, *store_, *registry_, *rendezvous_);
    ASSERT_TRUE(jobs_->Load().ok());
  }
  void TearDown() override {
    exporter_.reset();
    jobs_.reset();
    rendezvous_.reset();
    registry_.reset();
    store_.reset();
    std::filesystem::remove_all(directory_);
  }

  void CreateExporter(std::chrono::milliseconds retention) {
    MetricsConfig config;
    config.retention = retention;
    absl::StatusOr<std::unique_ptr<MetricsExporter>> exporter =
        MetricsExporter::Create(config, *jobs_, *registry_, [this] { return now_; });
    ASSERT_TRUE(exporter.ok()) << exporter.status();
    exporter_ = std::move(*exporter);
  }

  // One step of a job as the job manager reports it: both ranks, the aggregate and a profile.
  void ReportStep(const std::string& job_id, int64_t step, double loss) {
    v1::Worker worker;
    worker.set_hostname("host-a");
    worker.set_gpu_index(0);
    worker.set_gpu_uuid("GPU-0");
    for (int rank = 0; rank < 2; ++rank) {
      v1::StepReport report;
      report.set_job_id(job_id);
      report.set_rank(rank);
      report.set_step(step);
      report.set_memory_peak_bytes(1000 + rank);
      report.set_memory_device_used_bytes(5000 + rank);
      report.set_memory_reserved_bytes(3000 + rank);
      report.set_exposed_comm_seconds(0.125);
      exporter_->OnRankStep(report, worker);
    }
    v1::StepReport aggregate;
    aggregate.set_job_id(job_id);
    aggregate.set_step(step);
    aggregate.set_loss(loss);
    aggregate.set_tokens_per_second(512);
    aggregate.set_mfu_ratio(0.25);
    aggregate.set_step_seconds(0.2);
    exporter_->OnAggregateStep(aggregate);
    v1::ProfileReport profile;
    profile.set_job_id(job_id);
    profile.set_rank(0);
    v1::KernelStat* kernel = profile.add_kernels();
    kernel->set_name("gemm");
    kernel->set_total_seconds(0.5);
    kernel->set_sm_throughput_ratio(0.75);
    kernel->set_dram_throughput_ratio(0.5);
    exporter_->OnProfile(profile);
  }

  // Every per-job family the exporter keeps, as the scrape names them for `job_id`.
  static std::vector<std::string> JobSeriesPrefixes(const std::string& job_id) {
    const std::string job = "job=\"" + job_id + "\"";
    return {"fsdpd_train_loss{" + job,
            "fsdpd_train_step{" + job,
            "fsdpd_train_tokens_per_second{" + job,
            "fsdpd_train_mfu_ratio{" + job,
            "fsdpd_train_step_duration_seconds_count{" + job,
            "fsdpd_train_step_duration_seconds_bucket{" + job,
            "fsdpd_gpu_memory_peak_bytes{UUID=\"GPU-0\",gpu=\"0\",hostname=\"host-a\"," + job,
            "fsdpd_gpu_memory_used_bytes{UUID=\"GPU-0\",gpu=\"0\",hostname=\"host-a\"," + job,
            "fsdpd_gpu_memory_reserved_bytes{UUID=\"GPU-0\",gpu=\"0\",hostname=\"host-a\"," + job,
            "fsdpd_comm_exposed_seconds_total{" + job,
            "fsdpd_kernel_gpu_seconds_total{" + job,
            "fsdpd_kernel_sm_throughput_ratio{" + job,
            "fsdpd_kernel_dram_throughput_ratio{" + job};
  }
  void ExpectSeries(const std::string& scrape, const std::string& job_id, bool present) {
    for (const std::string& prefix : JobSeriesPrefixes(job_id)) {
      if (present) {
        EXPECT_THAT(scrape, HasSubstr(prefix)) << "missing series " << prefix;
      } else {
        EXPECT_THAT(scrape, Not(HasSubstr(prefix))) << "series kept past retention: " << prefix;
      }
    }
  }

  std::string directory_;
  Clock::time_point now_ = Clock::now();
  std::unique_ptr<SqliteJobStore> store_;
  std::unique_ptr<WorkerRegistry> registry_;
  std::unique_ptr<RendezvousStore> rendezvous_;
  std::unique_ptr<JobManager> jobs_;
  std::unique_ptr<MetricsExporter> exporter_;
};

TEST_F(MetricsExporterTest, StepDurationIsAHistogramPerJob) {
  CreateExporter(std::chrono::minutes(5));
  ReportStep("job-a", 1, 4.5);
  ReportStep("job-a", 2, 4.0);
  ReportStep("job-b", 1, 5.0);
  const std::string scrape = exporter_->Render();
  EXPECT_THAT(scrape, HasSubstr("# TYPE fsdpd_train_step_duration_seconds histogram"));
  EXPECT_THAT(scrape, HasSubstr("fsdpd_train_step_duration_seconds_count{job=\"job-a\"} 2"));
  EXPECT_THAT(scrape, HasSubstr("fsdpd_train_step_duration_seconds_count{job=\"job-b\"} 1"));
  // 0.2 s lands in the 0.25 bucket, not in 0.1; the buckets run from 0.01 to 60 s.
  EXPECT_THAT(scrape,
              HasSubstr("fsdpd_train_step_duration_seconds_bucket{job=\"job-a\",le=\"0.1\"} 0"));
  EXPECT_THAT(scrape,
              HasSubstr("fsdpd_train_step_duration_seconds_bucket{job=\"job-a\",le=\"0.25\"} 2"));
  EXPECT_THAT(scrape,
              HasSubstr("fsdpd_train_step_duration_seconds_bucket{job=\"job-a\",le=\"0.01\"} 0"));
  EXPECT_THAT(scrape,
              HasSubstr("fsdpd_train_step_duration_seconds_bucket{job=\"job-a\",le=\"60\"} 2"));
  EXPECT_THAT(scrape, Not(HasSubstr("fsdpd_train_step_duration_seconds_count ")));
}

// fsdpd_job_eval_loss appears with a job's first validated step and keeps the latest value
// through the steps without validation.
TEST_F(MetricsExporterTest, EvalLossIsTheLatestValidatedStepsPerJob) {
  CreateExporter(std::chrono::minutes(5));
  ReportStep("job-v", 1, 4.5);
  EXPECT_THAT(exporter_->Render(), Not(HasSubstr("fsdpd_job_eval_loss{job=\"job-v\"}")));
  v1::StepReport validated;
  validated.set_job_id("job-v");
  validated.set_step(2);
  validated.set_loss(4.25);
  validated.set_eval_loss(4.375);
  exporter_->OnAggregateStep(validated);
  EXPECT_EQ(Sample(exporter_->Render(), "fsdpd_job_eval_loss{job=\"job-v\"}"), 4.375);
  ReportStep("job-v", 3, 4.0);
  const std::string scrape = exporter_->Render();
  EXPECT_EQ(Sample(scrape, "fsdpd_job_eval_loss{job=\"job-v\"}"), 4.375);
  EXPECT_EQ(Sample(scrape, "fsdpd_train_loss{job=\"job-v\"}"), 4.0);
}

TEST_F(MetricsExporterTest, DriverMemoryIsAGaugePerRankAndUnknownIsLeftOut) {
  CreateExporter(std::chrono::minutes(5));
  ReportStep("job-a", 1, 4.5);
  std::string scrape = exporter_->Render();
  EXPECT_THAT(scrape, HasSubstr("fsdpd_gpu_memory_used_bytes{UUID=\"GPU-0\",gpu=\"0\",hostname="
                                "\"host-a\",job=\"job-a\",rank=\"1\"} 5001"));
  EXPECT_THAT(scrape, HasSubstr("fsdpd_gpu_memory_reserved_bytes{UUID=\"GPU-0\",gpu=\"0\","
                                "hostname=\"host-a\",job=\"job-a\",rank=\"1\"} 3001"));
  v1::Worker worker;
  worker.set_hostname("host-b");
  v1::StepReport report;
  report.set_job_id("job-b");
  report.set_step(1);
  report.set_memory_peak_bytes(10);
  exporter_->OnRankStep(report, worker);  // memory_device_used_bytes unset: unknown
  scrape = exporter_->Render();
  EXPECT_THAT(scrape, HasSubstr("fsdpd_gpu_memory_peak_bytes{UUID=\"\",gpu=\"0\",hostname="
                                "\"host-b\",job=\"job-b\",rank=\"0\"} 10"));
  EXPECT_THAT(scrape, Not(HasSubstr("fsdpd_gpu_memory_used_bytes{UUID=\"\",gpu=\"0\",hostname="
                                    "\"host-b\"")));
  EXPECT_THAT(scrape, Not(HasSubstr("fsdpd_gpu_memory_reserved_bytes{UUID=\"\",gpu=\"0\","
                                    "hostname=\"host-b\"")));
}

// A rank's device series are looked up once per attempt: later reports update the same series,
// and a retry on another worker starts series with that worker's labels.
TEST_F(MetricsExporterTest, RankSeriesFollowTheRankAcrossStepsAndAttempts) {
  CreateExporter(std::chrono::minutes(5));
  v1::Worker first;
  first.set_hostname("host-a");
  first.set_gpu_uuid("GPU-A");
  v1::StepReport report;
  report.set_job_id("job-r");
  report.set_attempt(1);
  report.set_rank(1);
  for (int step = 1; step <= 3; ++step) {
    report.set_step(step);
    report.set_memory_peak_bytes(100 * step);
    report.set_exposed_comm_seconds(0.5);
    exporter_->OnRankStep(report, first);
  }
  const std::string labels_a =
      "{UUID=\"GPU-A\",gpu=\"0\",hostname=\"host-a\",job=\"job-r\",rank=\"1\"}";
  std::string scrape = exporter_->Render();
  EXPECT_EQ(Sample(scrape, "fsdpd_gpu_memory_peak_bytes" + labels_a), 300);
  EXPECT_EQ(Sample(scrape, "fsdpd_comm_exposed_seconds_total{job=\"job-r\",rank=\"1\"}"), 1.5);

  v1::Worker second;
  second.set_hostname("host-b");
  second.set_gpu_index(3);
  second.set_gpu_uuid("GPU-B");
  report.set_attempt(2);
  report.set_step(4);
  report.set_memory_peak_bytes(7);
  exporter_->OnRankStep(report, second);
  scrape = exporter_->Render();
  EXPECT_EQ(
      Sample(
          scrape,
          "fsdpd_gpu_memory_peak_bytes{UUID=\"GPU-B\",gpu=\"3\",hostname=\"host-b\",job=\"job-r\","
          "rank=\"1\"}"),
      7);
  EXPECT_EQ(Sample(scrape, "fsdpd_gpu_memory_peak_bytes" + labels_a), 300);
  EXPECT_EQ(Sample(scrape, "fsdpd_comm_exposed_seconds_total{job=\"job-r\",rank=\"1\"}"), 2.0);

  // Once the job's series expire, a late report starts them afresh instead of writing to freed
  // ones.
  exporter_->OnJobFinished("job-r");
  now_ += std::chrono::minutes(5);
  EXPECT_EQ(Sample(exporter_->Render(), "fsdpd_gpu_memory_peak_bytes" + labels_a), -1);
  report.set_step(5);
  exporter_->OnRankStep(report, second);
  EXPECT_EQ(
      Sample(exporter_->Render(), "fsdpd_comm_exposed_seconds_total{job=\"job-r\",rank=\"1\"}"),
      0.5);
}

TEST_F(MetricsExporterTest, FinishedJobSeriesStayForTheRetentionThenGo) {
  CreateExporter(std::chrono::minutes(5));
  ReportStep("job-done", 1, 4.5);
  ReportStep("job-live", 1, 5.0);
  ExpectSeries(exporter_->Render(), "job-done", true);

  exporter_->OnJobFinished("job-done");
  now_ += std::chrono::minutes(4);
  std::string scrape = exporter_->Render();
  ExpectSeries(scrape, "job-done", true);
  EXPECT_THAT(scrape, HasSubstr("fsdpd_train_loss{job=\"job-done\"} 4.5"));

  now_ += std::chrono::minutes(1);
  scrape = exporter_->Render();
  ExpectSeries(scrape, "job-done", false);
  // The running job and the coordinator-wide series are untouched.
  ExpectSeries(scrape, "job-live", true);
  EXPECT_THAT(scrape, HasSubstr("fsdpd_jobs{state=\"RUNNING\"}"));

  // The live job keeps reporting; its series stay until it too finishes and expires.
  ReportStep("job-live", 2, 4.75);
  EXPECT_THAT(exporter_->Render(), HasSubstr("fsdpd_train_step{job=\"job-live\"} 2"));
  exporter_->OnJobFinished("job-live");
  now_ += std::chrono::minutes(5);
  ExpectSeries(exporter_->Render(), "job-live", false);
}

TEST_F(MetricsExporterTest, ZeroRetentionRemovesSeriesWhenTheJobEnds) {
  CreateExporter(std::chrono::milliseconds(0));
  ReportStep("job-a", 1, 4.5);
  ExpectSeries(exporter_->Render(), "job-a", true);
  exporter_->OnJobFinished("job-a");
  ExpectSeries(exporter_->Render(), "job-a", false);
}

// fsdpd_job_info exists for every job from submission, including one that never reaches a
// step, and one that ends between two scrapes; it goes with the job's other series.
TEST_F(MetricsExporterTest, EveryJobHasAnInfoSeriesFromSubmissionUntilItsRetentionEnds) {
  CreateExporter(std::chrono::minutes(5));
  v1::JobSpec spec = ::fsdpd::testing::TinyJobSpec();
  absl::StatusOr<std::string> waiting = jobs_->Submit(spec);  // no workers: stays PENDING
  ASSERT_TRUE(waiting.ok()) << waiting.status();
  const std::string waiting_info =
      "fsdpd_job_info{job=\"" + *waiting + "\",name=\"" + spec.name() + "\"}";
  EXPECT_EQ(Sample(exporter_->Render(), waiting_info), 1);

  spec.set_name("cancelled-unseen");
  absl::StatusOr<std::string> unseen = jobs_->Submit(spec);
  ASSERT_TRUE(unseen.ok()) << unseen.status();
  ASSERT_TRUE(jobs_->Cancel(*unseen, "test").ok());  // ends before any scrape
  const std::string unseen_info =
      "fsdpd_job_info{job=\"" + *unseen + "\",name=\"cancelled-unseen\"}";
  std::string scrape = exporter_->Render();
  EXPECT_EQ(Sample(scrape, unseen_info), 1);
  EXPECT_EQ(Sample(scrape, waiting_info), 1);

  ASSERT_TRUE(jobs_->Cancel(*waiting, "test").ok());
  now_ += std::chrono::minutes(4);
  EXPECT_EQ(Sample(exporter_->Render(), waiting_info), 1);
  now_ += std::chrono::minutes(1);
  scrape = exporter_->Render();
  EXPECT_EQ(Sample(scrape, waiting_info), -1);
  EXPECT_EQ(Sample(scrape, unseen_info), -1);
  // An ended job is not added back by later scrapes.
  EXPECT_THAT(exporter_->Render(), Not(HasSubstr("fsdpd_job_info{")));
}

// One series per known worker, with its host, device and state, for the lost-worker alert.
TEST_F(MetricsExporterTest, WorkerStateIsOneSeriesPerWorkerWithHostAndDevice) {
  CreateExporter(std::chrono::minutes(5));
  v1::RegisterRequest gpu;
  gpu.set_hostname("host-a");
  gpu.set_device_kind("cuda");
  gpu.set_gpu_index(3);
  absl::StatusOr<std::pair<std::string, RankAssignment>> gpu_worker =
      registry_->Register(gpu, Clock::now());
  ASSERT_TRUE(gpu_worker.ok()) << gpu_worker.status();
  v1::RegisterRequest cpu;
  cpu.set_hostname("host-b");
  cpu.set_device_kind("cpu");
  cpu.set_gpu_index(-1);
  absl::StatusOr<std::pair<std::string, RankAssignment>> cpu_worker =
      registry_->Register(cpu, Clock::now());
  ASSERT_TRUE(cpu_worker.ok()) << cpu_worker.status();
  std::string scrape = exporter_->Render();
  EXPECT_EQ(Sample(scrape,
                   "fsdpd_worker_state{device=\"cuda:3\",hostname=\"host-a\",state="
                   "\"IDLE\",worker=\"" +
                       gpu_worker->first + "\"}"),
            1);
  EXPECT_EQ(Sample(scrape,
                   "fsdpd_worker_state{device=\"cpu\",hostname=\"host-b\",state="
                   "\"IDLE\",worker=\"" +
                       cpu_worker->first + "\"}"),
            1);
  registry_->ExpireSilentWorkers(Clock::now() + registry_->config().heartbeat_timeout +
                                 std::chrono::seconds(1));
  scrape = exporter_->Render();
  EXPECT_EQ(Sample(scrape,
                   "fsdpd_worker_state{device=\"cpu\",hostname=\"host-b\",state="
                   "\"LOST\",worker=\"" +
                       cpu_worker->first + "\"}"),
            1);
  EXPECT_THAT(scrape, Not(HasSubstr("state=\"IDLE\",worker=")));
}

// The overload signals of docs/operations.md: the processing lag, and whether lost-worker
// decisions are suspended (here by a stall far above the bound).
TEST_F(MetricsExporterTest, LostWorkerDecisionsSuspendedUnderProcessingLag) {
  CreateExporter(std::chrono::minutes(5));
  std::string scrape = exporter_->Render();
  EXPECT_EQ(Sample(scrape, "\nfsdpd_lost_worker_decisions_suspended"), 0);
  EXPECT_EQ(Sample(scrape, "\nfsdpd_lost_worker_decisions_suspensions_total"), 0);
  jobs_->processing_lag().NoteStall(std::chrono::seconds(30));
  jobs_->Tick();
  scrape = exporter_->Render();
  EXPECT_EQ(Sample(scrape, "\nfsdpd_lost_worker_decisions_suspended"), 1);
  EXPECT_EQ(Sample(scrape, "\nfsdpd_lost_worker_decisions_suspensions_total"), 1);
  EXPECT_EQ(Sample(scrape, "\nfsdpd_processing_lag_seconds"), 30);
  EXPECT_EQ(Sample(scrape, "\nfsdpd_silent_workers_held"), 0);
  // The same lag paces the workers' reports, at the heartbeat interval first.
  EXPECT_EQ(Sample(scrape, "\nfsdpd_report_pacing_interval_seconds"), 1);
  EXPECT_EQ(Sample(scrape, "\nfsdpd_report_pacings_total"), 1);
  jobs_->Tick();  // caught up
  scrape = exporter_->Render();
  EXPECT_EQ(Sample(scrape, "\nfsdpd_lost_worker_decisions_suspended"), 0);
  EXPECT_EQ(Sample(scrape, "\nfsdpd_lost_worker_decisions_suspensions_total"), 1);
  // Pacing eases only after a calm spell (report_pacer.h).
  EXPECT_EQ(Sample(scrape, "\nfsdpd_report_pacing_interval_seconds"), 1);
}

// The real services behind a loopback server with the exporter's timing interceptors, as the
// coordinator builds it.
TEST_F(MetricsExporterTest, RpcLatencyIsAHistogramPerMethodFromRealCalls) {
  CreateExporter(std::chrono::minutes(5));
  RendezvousServiceImpl rendezvous(*rendezvous_, exporter_.get());
  JobServiceImpl job_service(*jobs_, *registry_, exporter_.get(), nullptr);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&rendezvous);
  builder.RegisterService(&job_service);
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> creators;
  creators.push_back(exporter_->RpcTimingInterceptors());
  builder.experimental().SetInterceptorCreators(std::move(creators));
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  ASSERT_GT(port, 0);
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials());
  auto kv = v1::RendezvousService::NewStub(channel);
  auto jobs = v1::JobService::NewStub(channel);

  // Two quick Sets, and a Get that waits 300 ms for its key.
  rendezvous_->OpenScope("job-rpc", 1);
  v1::Scope scope;
  scope.set_job_id("job-rpc");
  scope.set_attempt(1);
  for (const char* key : {"warm-up", "other"}) {
    grpc::ClientContext context;
    v1::SetRequest set;
    *set.mutable_scope() = scope;
    set.set_key(key);
    set.set_value("x");
    v1::SetResponse response;
    const grpc::Status status = kv->Set(&context, set, &response);
    ASSERT_TRUE(status.ok()) << status.error_code() << ": " << status.error_message();
  }
  constexpr double kGetWaitSeconds = 0.3;
  // The wait counts from the moment the server has parked the Get, so a slow client start
  // cannot shorten the server-side duration below kGetWaitSeconds.
  std::thread setter([&] {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (rendezvous_->WaiterCount("job-rpc", 1) == 0 &&
           std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(kGetWaitSeconds));
    ASSERT_TRUE(rendezvous_->Set("job-rpc", 1, "late", "value").ok());
  });
  {
    grpc::ClientContext context;
    v1::GetRequest get;
    *get.mutable_scope() = scope;
    get.set_key("late");
    get.set_timeout_millis(10000);
    v1::GetResponse response;
    const grpc::Status status = kv->Get(&context, get, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(response.value(), "value");
  }
  setter.join();

  // A response stream: the first event of a pending job's history, then the client leaves.
  v1::JobSpec spec = DefaultJobSpec();
  spec.set_name("rpc-latency");
  spec.mutable_parallel()->set_world_size(1);
  spec.mutable_parallel()->set_device("cpu");
  absl::StatusOr<std::string> id = jobs_->Submit(spec);
  ASSERT_TRUE(id.ok()) << id.status();
  {
    grpc::ClientContext context;
    v1::WatchJobRequest watch;
    watch.set_id(*id);
    std::unique_ptr<grpc::ClientReader<v1::JobEvent>> reader = jobs->WatchJob(&context, watch);
    v1::JobEvent event;
    ASSERT_TRUE(reader->Read(&event));
    context.TryCancel();
    while (reader->Read(&event)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  server->Shutdown();
  server->Wait();

  const std::string scrape = exporter_->Render();
  EXPECT_THAT(scrape, HasSubstr("# TYPE fsdpd_rpc_duration_seconds histogram"));
  EXPECT_THAT(scrape, HasSubstr("# TYPE fsdpd_rpc_first_message_seconds histogram"));
  EXPECT_EQ(Sample(scrape, "fsdpd_rpc_duration_seconds_count{method=\"Set\"}"), 2);
  EXPECT_EQ(Sample(scrape, "fsdpd_rpc_duration_seconds_count{method=\"Get\"}"), 1);
  // The Get waited at least 300 ms: nothing in the buckets up to 0.25 s, all of it by 60 s.
  EXPECT_EQ(Sample(scrape, "fsdpd_rpc_duration_seconds_bucket{method=\"Get\",le=\"0.25\"}"), 0);
  EXPECT_EQ(Sample(scrape, "fsdpd_rpc_duration_seconds_bucket{method=\"Get\",le=\"60\"}"), 1);
  EXPECT_GE(Sample(scrape, "fsdpd_rpc_duration_seconds_sum{method=\"Get\"}"), kGetWaitSeconds);
  // The quick Sets: both well inside the 0.25 s bucket.
  EXPECT_EQ(Sample(scrape, "fsdpd_rpc_duration_seconds_bucket{method=\"Set\",le=\"0.25\"}"), 2);
  // The stream: one first message and one end; unary RPCs have no first-message series.
  EXPECT_EQ(Sample(scrape, "fsdpd_rpc_first_message_seconds_count{method=\"WatchJob\"}"), 1);
  EXPECT_EQ(Sample(scrape, "fsdpd_rpc_duration_seconds_count{method=\"WatchJob\"}"), 1);
  EXPECT_GE(Sample(scrape, "fsdpd_rpc_duration_seconds_sum{method=\"WatchJob\"}"),
            Sample(scrape, "fsdpd_rpc_first_message_seconds_sum{method=\"WatchJob\"}"));
  EXPECT_THAT(scrape, Not(HasSubstr("fsdpd_rpc_first_message_seconds_count{method=\"Get\"}")));
  // The request counter still counts the same calls.
  EXPECT_THAT(scrape, HasSubstr("fsdpd_rpc_requests_total{code=\"OK\",method=\"Set\"} 2"));
}

TEST_F(MetricsExporterTest, RpcMethodLabelsAreBoundedToTheServicesMethods) {
  CreateExporter(std::chrono::minutes(5));
  exporter_->ObserveRpcDuration("/fsdpd.v1.JobService/SubmitJob", 0.002);
  exporter_->ObserveRpcDuration("/fsdpd.v1.JobService/NoSuchMethod", 0.002);
  exporter_->ObserveRpcDuration("/made.up.Service/Anything", 0.002);
  exporter_->ObserveRpcDuration("garbage", 0.002);
  const std::string scrape = exporter_->Render();
  EXPECT_EQ(Sample(scrape, "fsdpd_rpc_duration_seconds_count{method=\"SubmitJob\"}"), 1);
  EXPECT_EQ(Sample(scrape, "fsdpd_rpc_duration_seconds_count{method=\"unknown\"}"), 3);
  EXPECT_THAT(scrape, Not(HasSubstr("NoSuchMethod")));
  EXPECT_THAT(scrape, Not(HasSubstr("Anything")));
  // 2 ms: above the 1 ms bucket, inside 2.5 ms.
  EXPECT_EQ(Sample(scrape, "fsdpd_rpc_duration_seconds_bucket{method=\"SubmitJob\",le=\"0.001\"}"),
            0);
  EXPECT_EQ(Sample(scrape, "fsdpd_rpc_duration_seconds_bucket{method=\"SubmitJob\",le=\"0.0025\"}"),
            1);
}

// Issue 11 §2: failed store writes are counted and the store's state is exposed.
TEST_F(MetricsExporterTest, StoreErrorsAreCountedAndTheStoreStateIsExposed) {
  CreateExporter(std::chrono::minutes(5));
  std::string scrape = exporter_->Render();
  EXPECT_THAT(scrape, HasSubstr("# TYPE fsdpd_store_errors_total counter"));
  EXPECT_THAT(scrape, HasSubstr("fsdpd_store_errors_total 0"));
  EXPECT_THAT(scrape, HasSubstr("fsdpd_store_writable 1"));
  absl::StatusOr<int64_t> pages = store_->LimitPages(0);  // 0 reads the page count
  ASSERT_TRUE(pages.ok()) << pages.status();
  ASSERT_TRUE(store_->LimitPages(*pages).ok());  // no room to grow: a full disk
  v1::JobSpec spec = ::fsdpd::testing::TinyJobSpec();
  spec.mutable_train()->set_steps(10);
  absl::StatusOr<std::string> submitted = std::string();
  for (int tries = 0; tries < 1000 && submitted.ok(); ++tries) submitted = jobs_->Submit(spec);
  EXPECT_EQ(submitted.status().code(), absl::StatusCode::kUnavailable) << submitted.status();
  scrape = exporter_->Render();
  EXPECT_THAT(scrape, HasSubstr("fsdpd_store_errors_total 1"));
  EXPECT_THAT(scrape, HasSubstr("fsdpd_store_writable 0"));
}

TEST(MetricsConfigTest, NegativeRetentionIsRejected) {
  MetricsConfig config;
  config.retention = std::chrono::milliseconds(-1);
  const absl::Status status = config.Check();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("metrics-retention"));
}

}  // namespace
}  // namespace fsdpd::server
