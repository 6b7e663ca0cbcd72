#include <gtest/gtest.h>

#include "server/config.h"

namespace fsdpd::server {
namespace {

CoordinatorConfig ValidConfig() {
  CoordinatorConfig config;
  config.state_dir = "/tmp/fsdpd-config-test";
  config.FillPaths();
  return config;
}

TEST(ConfigTest, DefaultsAreValidAndPathsDeriveFromTheStateDir) {
  CoordinatorConfig config = ValidConfig();
  EXPECT_TRUE(config.Check().ok()) << config.Check();
  EXPECT_EQ(config.store.database_path, "/tmp/fsdpd-config-test/fsdpd.db");
  EXPECT_EQ(config.jobs.artifact_dir, "/tmp/fsdpd-config-test/artifacts");
  EXPECT_EQ(config.listen, "127.0.0.1:7070");
  EXPECT_EQ(config.workers.heartbeat_timeout, std::chrono::seconds(10));
  EXPECT_EQ(config.jobs.max_world_size, 1024);
  EXPECT_EQ(config.jobs.max_log_bytes_per_job, int64_t{256} << 20);
}

TEST(ConfigTest, NonLoopbackListenNeedsInsecure) {
  CoordinatorConfig config = ValidConfig();
  config.listen = "0.0.0.0:7070";
  absl::Status status = config.Check();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("--insecure"), std::string::npos) << status;
  config.insecure = true;
  EXPECT_TRUE(config.Check().ok());
  for (const char* loopback : {"127.0.0.1:1", "localhost:2", "[::1]:3", "127.9.9.9:4"}) {
    EXPECT_TRUE(IsLoopbackAddress(loopback)) << loopback;
  }
  for (const char* remote : {"10.0.0.1:1", "[::]:2", "example.com:3"}) {
    EXPECT_FALSE(IsLoopbackAddress(remote)) << remote;
  }
}

// /metrics and the health port are plaintext: the first follows --listen's rule with its own
// flag; the second serves only health statuses, so any address is accepted if it parses.
TEST(ConfigTest, NonLoopbackMetricsNeedInsecureMetrics) {
  CoordinatorConfig config = ValidConfig();
  config.metrics.listen = "0.0.0.0:7071";
  absl::Status status = config.Check();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("--insecure-metrics"), std::string::npos) << status;
  config.insecure = true;  // --insecure is for the gRPC port only
  EXPECT_FALSE(config.Check().ok());
  config.metrics.insecure = true;
  EXPECT_TRUE(config.Check().ok());
  config.health_listen = "0.0.0.0:7072";
  EXPECT_TRUE(config.Check().ok());
  config.health_listen = "no-port";
  EXPECT_NE(config.Check().message().find("health-listen"), std::string::npos);
}

TEST(ConfigTest, BadValuesNameTheSetting) {
  CoordinatorConfig config = ValidConfig();
  config.listen = "127.0.0.1";
  EXPECT_NE(config.Check().message().find("listen"), std::string::npos);
  config = ValidConfig();
  config.jobs.max_world_size = 0;
  EXPECT_NE(config.Check().message().find("max-world-size"), std::string::npos);
  config = ValidConfig();
  config.jobs.max_log_bytes_per_job = 1000;
  EXPECT_NE(config.Check().message().find("max-log-bytes-per-job: must be at least 65536"),
            std::string::npos)
      << config.Check();
  config = ValidConfig();
  config.jobs.watch_replay_steps = -5;
  EXPECT_EQ(config.Check().message(), "watch-replay-steps: must not be negative, got -5");
  config = ValidConfig();
  config.store.rank_report_steps = -1;
  EXPECT_EQ(config.Check().message(),
            "rank-report-steps: must be 0 (keep every step) or positive, got -1");
  config = ValidConfig();
  config.workers.heartbeat_timeout = std::chrono::milliseconds(500);
  EXPECT_NE(config.Check().message().find("heartbeat"), std::string::npos);
  config = ValidConfig();
  config.metrics.listen = "nowhere";
  EXPECT_NE(config.Check().message().find("metrics-listen"), std::string::npos);
}

TEST(ConfigTest, DurationsAcceptUnits) {
  EXPECT_EQ(*ParseDuration("10s"), std::chrono::seconds(10));
  EXPECT_EQ(*ParseDuration("250ms"), std::chrono::milliseconds(250));
  EXPECT_EQ(*ParseDuration("2m"), std::chrono::minutes(2));
  EXPECT_EQ(*ParseDuration("1.5"), std::chrono::milliseconds(1500));
  EXPECT_FALSE(ParseDuration("soon").ok());
  EXPECT_FALSE(ParseDuration("-3s").ok());
  EXPECT_FALSE(ParseDuration("").ok());
}

TEST(ConfigTest, SizesAcceptBinaryAndDecimalUnits) {
  EXPECT_EQ(*ParseByteSize("8GiB"), int64_t{8} << 30);
  EXPECT_EQ(*ParseByteSize("512MiB"), int64_t{512} << 20);
  EXPECT_EQ(*ParseByteSize("1PiB"), int64_t{1} << 50);
  EXPECT_EQ(*ParseByteSize("80GB"), int64_t{80'000'000'000});
  EXPECT_EQ(*ParseByteSize("1.5KiB"), 1536);
  EXPECT_EQ(*ParseByteSize("4096"), 4096);
  EXPECT_EQ(*ParseByteSize("4096B"), 4096);
  for (const char* bad : {"", "GiB", "-1GiB", "8 bananas", "8XB", "99999PiB"}) {
    absl::StatusOr<int64_t> size = ParseByteSize(bad);
    EXPECT_FALSE(size.ok()) << bad;
    EXPECT_NE(size.status().message().find("64GiB"), std::string::npos) << size.status();
  }
}

TEST(ConfigTest, MemoryCeilingsApplyToEveryKindOrToEachNamedOne) {
  WorkerRegistryConfig config;
  EXPECT_EQ(config.MemoryCeiling("cpu"), 0);  // none by default
  EXPECT_EQ(config.MemoryCeiling("cuda"), 0);
  ASSERT_TRUE(ParseMemoryCeilings("64GiB", &config).ok());
  EXPECT_EQ(config.MemoryCeiling("cpu"), int64_t{64} << 30);
  EXPECT_EQ(config.MemoryCeiling("cuda"), int64_t{64} << 30);
  config = WorkerRegistryConfig{};
  ASSERT_TRUE(ParseMemoryCeilings("cuda=80GB", &config).ok());
  EXPECT_EQ(config.MemoryCeiling("cpu"), 0);
  EXPECT_EQ(config.MemoryCeiling("cuda"), int64_t{80'000'000'000});
  ASSERT_TRUE(ParseMemoryCeilings("cpu=2GiB,cuda=1GiB", &config).ok());
  EXPECT_EQ(config.MemoryCeiling("cpu"), int64_t{2} << 30);
  EXPECT_EQ(config.MemoryCeiling("cuda"), int64_t{1} << 30);
  absl::Status bad = ParseMemoryCeilings("tpu=1GiB", &config);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("max-worker-memory: unknown device kind \"tpu\""), std::string::npos)
      << bad;
  bad = ParseMemoryCeilings("cpu=lots", &config);
  EXPECT_NE(bad.message().find("max-worker-memory: cpu:"), std::string::npos) << bad;
}

TEST(ConfigTest, PriorityCapsNameARoleThatMaySubmit) {
  CoordinatorConfig config = ValidConfig();
  EXPECT_EQ(config.jobs.max_priority_submitter, 100);
  EXPECT_EQ(config.jobs.max_priority_admin, 1000);
  ASSERT_TRUE(ParsePriorityCaps("submitter=10,admin=500", &config.jobs).ok());
  EXPECT_EQ(config.jobs.max_priority_submitter, 10);
  EXPECT_EQ(config.jobs.max_priority_admin, 500);
  ASSERT_TRUE(ParsePriorityCaps("submitter=-5", &config.jobs).ok());
  EXPECT_EQ(config.jobs.max_priority_submitter, -5);
  EXPECT_EQ(config.jobs.max_priority_admin, 500);  // left as it was
  EXPECT_TRUE(config.Check().ok());
  absl::Status bad = ParsePriorityCaps("viewer=10", &config.jobs);
  EXPECT_NE(bad.message().find("\"viewer\" is not a role that may submit"), std::string::npos)
      << bad;
  bad = ParsePriorityCaps("submitter", &config.jobs);
  EXPECT_NE(bad.message().find("expected ROLE=N"), std::string::npos) << bad;
  config.jobs.max_priority_admin = 5000;
  bad = config.Check();
  EXPECT_NE(bad.message().find("max-priority"), std::string::npos) << bad;
}

}  // namespace
}  // namespace fsdpd::server
