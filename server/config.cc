#include "server/config.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

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
  if (max_memory_cpu < 0 || max_memory_cuda < 0) {
    return absl::InvalidArgumentError("max-worker-memory: must not be negative");
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
  for (const int cap : {max_priority_submitter, max_priority_admin}) {
    if (cap < -1000 || cap > 1000) {
      return absl::InvalidArgumentError(absl::StrCat(
          "max-priority: a cap must lie in -1000..1000 (the spec's own bounds), got ", cap));
    }
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

absl::StatusOr<int64_t> ParseByteSize(const std::string& text) {
  static const std::pair<const char*, double> kUnits[] = {{"KiB", 1024.0},
                                                          {"MiB", 1024.0 * 1024},
                                                          {"GiB", 1024.0 * 1024 * 1024},
                                                          {"TiB", 0x1p40},
                                                          {"PiB", 0x1p50},
                                                          {"KB", 1e3},
                                                          {"MB", 1e6},
                                                          {"GB", 1e9},
                                                          {"TB", 1e12},
                                                          {"PB", 1e15},
                                                          {"B", 1}};
  std::string number = text;
  double scale = 1;
  for (const auto& [suffix, factor] : kUnits) {
    if (absl::EndsWith(text, suffix)) {
      number = text.substr(0, text.size() - std::string(suffix).size());
      scale = factor;
      break;
    }
  }
  double value = 0;
  if (number.empty() || !absl::SimpleAtod(number, &value) || !(value >= 0) ||
      value * scale > 9.2e18) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expected a size like 64GiB, 512MiB, 80GB or a number of bytes, got \"", text, "\""));
  }
  return static_cast<int64_t>(value * scale + 0.5);
}

absl::Status ParseMemoryCeilings(const std::string& text, WorkerRegistryConfig* config) {
  if (text.find('=') == std::string::npos) {
    absl::StatusOr<int64_t> bytes = ParseByteSize(text);
    if (!bytes.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("max-worker-memory: ", bytes.status().message()));
    }
    config->max_memory_cpu = config->max_memory_cuda = *bytes;
    return absl::OkStatus();
  }
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    const std::pair<std::string, std::string> entry = absl::StrSplit(part, absl::MaxSplits('=', 1));
    absl::StatusOr<int64_t> bytes = ParseByteSize(entry.second);
    if (!bytes.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("max-worker-memory: ", entry.first, ": ", bytes.status().message()));
    }
    if (entry.first == "cpu") {
      config->max_memory_cpu = *bytes;
    } else if (entry.first == "cuda") {
      config->max_memory_cuda = *bytes;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("max-worker-memory: unknown device kind \"",
                                                     entry.first,
                                                     "\" (expected SIZE, or cpu=SIZE,cuda=SIZE)"));
    }
  }
  return absl::OkStatus();
}

absl::Status ParsePriorityCaps(const std::string& text, JobManagerConfig* config) {
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    const std::pair<std::string, std::string> entry = absl::StrSplit(part, absl::MaxSplits('=', 1));
    int cap = 0;
    if (!absl::SimpleAtoi(entry.second, &cap)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "max-priority: expected ROLE=N (e.g. submitter=10,admin=1000), got \"", part, "\""));
    }
    if (entry.first == "submitter") {
      config->max_priority_submitter = cap;
    } else if (entry.first == "admin") {
      config->max_priority_admin = cap;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "max-priority: \"", entry.first, "\" is not a role that may submit (submitter, admin)"));
    }
  }
  return absl::OkStatus();
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
