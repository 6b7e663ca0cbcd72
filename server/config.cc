#include "server/config.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace fsdpd::server {
namespace {

absl::Status CheckHostPort(const std::string& flag, const std::string& address) {
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": expected HOST:PORT with a port in 0..65535, got \"", address, "\""));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status JobStoreConfig::Check() const {
  if (database_path.empty()) return absl::InvalidArgumentError("store: database path is empty");
  if (batch_rows < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("store: batch_rows must be at least 1, got ", batch_rows));
  }
  if (flush_interval.count() <= 0) {
    return absl::InvalidArgumentError("store: flush interval must be positive");
  }
  if (rank_report_steps < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank-report-steps: must be 0 (keep every step) or positive, got ", rank_report_steps));
  }
  return absl::OkStatus();
}

absl::Status WorkerRegistryConfig::Check() const {
  if (heartbeat_timeout.count() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("heartbeat-timeout: must be positive, got ", heartbeat_timeout.count(), "ms"));
  }
  if (heartbeat_interval.count() <= 0 || heartbeat_interval >= heartbeat_timeout) {
    return absl::InvalidArgumentError(
        absl::StrCat("heartbeat interval (", heartbeat_interval.count(),
                     "ms) must be positive and shorter than the heartbeat timeout (",
                     heartbeat_timeout.count(), "ms)"));
  }
  if (lost_retention < heartbeat_timeout) {
    return absl::InvalidArgumentError(
        absl::StrCat("lost-worker-retention: must be at least the heartbeat timeout (",
                     heartbeat_timeout.count(), "ms), got ", lost_retention.count(), "ms"));
  }
  if (max_workers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max-workers: must be positive, got ", max_workers));
  }
  if (!(register_rate_per_peer > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("register-rate: must be positive, got ", register_rate_per_peer));
  }
  return absl::OkStatus();
}

absl::Status RendezvousConfig::Check() const {
  if (default_get_timeout.count() <= 0 || max_get_timeout < default_get_timeout) {
    return absl::InvalidArgumentError(
        "rendezvous: default Get timeout must be positive and at most the maximum");
  }
  if (max_keys_per_rank < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("rendezvous-keys-per-rank: must be positive, got ", max_keys_per_rank));
  }
  if (max_value_bytes < 1 || value_bytes_per_rank < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("rendezvous-value-bytes: must be positive, got ", max_value_bytes));
  }
  return absl::OkStatus();
}

absl::Status JobManagerConfig::Check() const {
  if (max_world_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max-world-size: must be at least 1, got ", max_world_size));
  }
  if (artifact_dir.empty()) return absl::InvalidArgumentError("jobs: artifact directory is empty");
  if (max_log_bytes_per_job < kMinLogBytesPerJob) {
    return absl::InvalidArgumentError(absl::StrCat("max-log-bytes-per-job: must be at least ",
                                                   kMinLogBytesPerJob, ", got ",
                                                   max_log_bytes_per_job));
  }
  if (watch_replay_steps < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("watch-replay-steps: must not be negative, got ", watch_replay_steps));
  }
  return absl::OkStatus();
}

absl::Status MetricsConfig::Check() const {
  if (retention.count() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics-retention: must not be negative, got ", retention.count(), "ms"));
  }
  if (listen.empty()) return absl::OkStatus();
  if (absl::Status status = CheckHostPort("metrics-listen", listen); !status.ok()) return status;
  if (!insecure && !IsLoopbackAddress(listen)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metrics-listen: ", listen,
        " is not a loopback address and /metrics is served in plaintext; keep it on loopback "
        "(scrape through a TLS proxy) or pass --insecure-metrics to serve it anyway"));
  }
  return absl::OkStatus();
}

void CoordinatorConfig::FillPaths() {
  if (store.database_path.empty()) store.database_path = state_dir + "/fsdpd.db";
  if (jobs.artifact_dir.empty()) jobs.artifact_dir = state_dir + "/artifacts";
}

absl::Status TlsConfig::Check() const {
  if (cert_path.empty() != key_path.empty()) {
    return absl::InvalidArgumentError("tls: --tls-cert and --tls-key must be given together");
  }
  if (!client_ca_path.empty() && cert_path.empty()) {
    return absl::InvalidArgumentError("tls: --tls-client-ca needs --tls-cert and --tls-key");
  }
  return absl::OkStatus();
}

absl::Status CoordinatorConfig::Check() const {
  if (absl::Status status = CheckHostPort("listen", listen); !status.ok()) return status;
  if (absl::Status status = tls.Check(); !status.ok()) return status;
  if (!insecure && !tls.enabled() && !IsLoopbackAddress(listen)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "listen: ", listen,
        " is not a loopback address; serve it with --tls-cert and --tls-key, or pass --insecure "
        "to serve it in plaintext anyway"));
  }
  if (!health_listen.empty()) {
    if (absl::Status status = CheckHostPort("health-listen", health_listen); !status.ok()) {
      return status;
    }
  }
  if (max_receive_message_bytes < (1 << 20) + (64 << 10)) {
    // Workers upload artifacts in 1 MiB chunks; a smaller limit would refuse every upload.
    return absl::InvalidArgumentError(
        absl::StrCat("max-request-bytes: must be at least 1114112 (1 MiB artifact chunks plus "
                     "framing), got ",
                     max_receive_message_bytes));
  }
  if (state_dir.empty()) return absl::InvalidArgumentError("state-dir: must not be empty");
  for (const absl::Status& status :
       {store.Check(), workers.Check(), rendezvous.Check(), jobs.Check(), metrics.Check()}) {
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::chrono::milliseconds> ParseDuration(const std::string& text) {
  std::string number = text;
  double scale = 1000;  // seconds by default
  if (absl::EndsWith(text, "ms")) {
    number = text.substr(0, text.size() - 2);
    scale = 1;
  } else if (absl::EndsWith(text, "s")) {
    number = text.substr(0, text.size() - 1);
  } else if (absl::EndsWith(text, "m")) {
    number = text.substr(0, text.size() - 1);
    scale = 60000;
  }
  double value = 0;
  if (number.empty() || !absl::SimpleAtod(number, &value) || value < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected a duration like 10s, 500ms or 2m, got \"", text, "\""));
  }
  return std::chrono::milliseconds(static_cast<int64_t>(value * scale + 0.5));
}

bool IsLoopbackAddress(const std::string& address) {
  const size_t colon = address.rfind(':');
  std::string host = colon == std::string::npos ? address : address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
}

}  // namespace fsdpd::server
