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

}  // namespace
}  // namespace fsdpd::server
