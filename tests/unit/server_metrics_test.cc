// The metrics exporter's per-job series: the step-duration histogram is labelled by job, and a
// finished job's series are removed once the retention passes (scrape text before and after).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "server/job_manager.h"
#include "server/metrics_exporter.h"
#include "server/sqlite_job_store.h"

namespace fsdpd::server {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using Clock = std::chrono::steady_clock;

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

TEST(MetricsConfigTest, NegativeRetentionIsRejected) {
  MetricsConfig config;
  config.retention = std::chrono::milliseconds(-1);
  const absl::Status status = config.Check();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("metrics-retention"));
}

}  // namespace
}  // namespace fsdpd::server
