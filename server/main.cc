// fsdpd: the coordinator. Settings come from, in increasing precedence: defaults, the --config
// YAML file, the environment (FSDPD_LISTEN, FSDPD_METRICS_LISTEN, FSDPD_STATE_DIR), and flags.
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "server/auth.h"
#include "server/config.h"
#include "server/coordinator.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"
#include "yaml-cpp/yaml.h"

#ifdef FSDPD_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

namespace {

using fsdpd::server::CoordinatorConfig;

struct Settings {
  std::optional<std::string> listen;
  std::optional<std::string> metrics_listen;
  std::optional<std::string> state_dir;
  std::optional<std::string> heartbeat_timeout;
  std::optional<std::string> metrics_retention;
  std::optional<std::string> lost_worker_retention;
  std::optional<int> max_world_size;
  std::optional<int64_t> max_log_bytes_per_job;
  std::optional<int64_t> rank_report_steps;
  std::optional<int64_t> watch_replay_steps;
  std::optional<bool> insecure;
  std::optional<std::string> tls_cert;
  std::optional<std::string> tls_key;
  std::optional<std::string> tls_client_ca;
  std::optional<std::string> tokens_file;
  std::optional<int> max_request_bytes;
  std::optional<bool> insecure_metrics;
  std::optional<int> max_workers;
  std::optional<double> register_rate;
  std::optional<std::string> health_listen;
  std::optional<int> rendezvous_keys_per_rank;
  std::optional<int64_t> rendezvous_value_bytes;
  std::optional<std::string> max_worker_memory;
  std::optional<std::string> max_priority;
};

std::string DefaultStateDir() {
  if (const char* state = std::getenv("XDG_STATE_HOME"); state != nullptr && *state != '\0') {
    return absl::StrCat(state, "/fsdpd");
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    return absl::StrCat(home, "/.local/state/fsdpd");
  }
  return "/var/lib/fsdpd";
}

// The config file uses the flags' names: listen, metrics-listen, state-dir, heartbeat-timeout,
// metrics-retention, lost-worker-retention, max-world-size, insecure, insecure-metrics,
// max-workers, register-rate, health-listen, max-log-bytes-per-job, rank-report-steps,
// watch-replay-steps, rendezvous-keys-per-rank, rendezvous-value-bytes, max-worker-memory,
// max-priority.
absl::Status LoadConfigFile(const std::string& path, Settings& settings) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& error) {
    return absl::InvalidArgumentError(absl::StrCat("--config ", path, ": ", error.what()));
  }
  if (root.IsNull()) return absl::OkStatus();
  if (!root.IsMap()) {
    return absl::InvalidArgumentError(absl::StrCat("--config ", path, ": expected a mapping"));
  }
  for (const auto& entry : root) {
    const std::string key = entry.first.as<std::string>();
    try {
      if (key == "listen") {
        settings.listen = entry.second.as<std::string>();
      } else if (key == "metrics-listen") {
        settings.metrics_listen = entry.second.as<std::string>();
      } else if (key == "state-dir") {
        settings.state_dir = entry.second.as<std::string>();
      } else if (key == "heartbeat-timeout") {
        settings.heartbeat_timeout = entry.second.as<std::string>();
      } else if (key == "metrics-retention") {
        settings.metrics_retention = entry.second.as<std::string>();
      } else if (key == "lost-worker-retention") {
        settings.lost_worker_retention = entry.second.as<std::string>();
      } else if (key == "max-world-size") {
        settings.max_world_size = entry.second.as<int>();
      } else if (key == "insecure") {
        settings.insecure = entry.second.as<bool>();
      } else if (key == "insecure-metrics") {
        settings.insecure_metrics = entry.second.as<bool>();
      } else if (key == "max-workers") {
        settings.max_workers = entry.second.as<int>();
      } else if (key == "register-rate") {
        settings.register_rate = entry.second.as<double>();
      } else if (key == "health-listen") {
        settings.health_listen = entry.second.as<std::string>();
      } else if (key == "max-log-bytes-per-job") {
        settings.max_log_bytes_per_job = entry.second.as<int64_t>();
      } else if (key == "rank-report-steps") {
        settings.rank_report_steps = entry.second.as<int64_t>();
      } else if (key == "watch-replay-steps") {
        settings.watch_replay_steps = entry.second.as<int64_t>();
      } else if (key == "rendezvous-keys-per-rank") {
        settings.rendezvous_keys_per_rank = entry.second.as<int>();
      } else if (key == "rendezvous-value-bytes") {
        settings.rendezvous_value_bytes = entry.second.as<int64_t>();
      } else if (key == "max-worker-memory") {
        settings.max_worker_memory = entry.second.as<std::string>();
      } else if (key == "max-priority") {
        settings.max_priority = entry.second.as<std::string>();
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("--config ", path, ": unknown key \"", key,
                         "\" (known: listen, metrics-listen, state-dir, heartbeat-timeout, "
                         "metrics-retention, lost-worker-retention, max-world-size, insecure, "
                         "insecure-metrics, max-workers, register-rate, health-listen, "
                         "max-log-bytes-per-job, rank-report-steps, watch-replay-steps, "
                         "rendezvous-keys-per-rank, rendezvous-value-bytes, "
                         "max-worker-memory, max-priority)"));
      }
    } catch (const YAML::Exception& error) {
      return absl::InvalidArgumentError(
          absl::StrCat("--config ", path, ": ", key, ": wrong type (", error.what(), ")"));
    }
  }
  return absl::OkStatus();
}

void ApplyEnvironment(Settings& settings) {
  if (const char* value = std::getenv("FSDPD_LISTEN")) settings.listen = value;
  if (const char* value = std::getenv("FSDPD_METRICS_LISTEN")) settings.metrics_listen = value;
  if (const char* value = std::getenv("FSDPD_STATE_DIR")) settings.state_dir = value;
}

// systemd's Type=notify protocol; does nothing outside systemd or without libsystemd.
void Notify(const char* state) {
#ifdef FSDPD_HAVE_SYSTEMD
  sd_notify(0, state);
#endif
}

// How often to send WATCHDOG=1 (zero: no watchdog): a third of WatchdogSec, for margin.
std::chrono::microseconds WatchdogPeriod() {
#ifdef FSDPD_HAVE_SYSTEMD
  uint64_t usec = 0;
  if (sd_watchdog_enabled(0, &usec) > 0 && usec > 0) return std::chrono::microseconds(usec / 3);
#endif
  return std::chrono::microseconds(0);
}

void Overlay(const Settings& from, Settings& onto) {
  if (from.listen) onto.listen = from.listen;
  if (from.metrics_listen) onto.metrics_listen = from.metrics_listen;
  if (from.state_dir) onto.state_dir = from.state_dir;
  if (from.heartbeat_timeout) onto.heartbeat_timeout = from.heartbeat_timeout;
  if (from.metrics_retention) onto.metrics_retention = from.metrics_retention;
  if (from.lost_worker_retention) onto.lost_worker_retention = from.lost_worker_retention;
  if (from.max_world_size) onto.max_world_size = from.max_world_size;
  if (from.max_log_bytes_per_job) onto.max_log_bytes_per_job = from.max_log_bytes_per_job;
  if (from.rank_report_steps) onto.rank_report_steps = from.rank_report_steps;
  if (from.watch_replay_steps) onto.watch_replay_steps = from.watch_replay_steps;
  if (from.insecure) onto.insecure = from.insecure;
  if (from.tls_cert) onto.tls_cert = from.tls_cert;
  if (from.tls_key) onto.tls_key = from.tls_key;
  if (from.tls_client_ca) onto.tls_client_ca = from.tls_client_ca;
  if (from.tokens_file) onto.tokens_file = from.tokens_file;
  if (from.max_request_bytes) onto.max_request_bytes = from.max_request_bytes;
  if (from.insecure_metrics) onto.insecure_metrics = from.insecure_metrics;
  if (from.max_workers) onto.max_workers = from.max_workers;
  if (from.register_rate) onto.register_rate = from.register_rate;
  if (from.health_listen) onto.health_listen = from.health_listen;
  if (from.rendezvous_keys_per_rank) onto.rendezvous_keys_per_rank = from.rendezvous_keys_per_rank;
  if (from.rendezvous_value_bytes) onto.rendezvous_value_bytes = from.rendezvous_value_bytes;
  if (from.max_worker_memory) onto.max_worker_memory = from.max_worker_memory;
  if (from.max_priority) onto.max_priority = from.max_priority;
}

absl::StatusOr<CoordinatorConfig> BuildConfig(const Settings& settings) {
  CoordinatorConfig config;
  config.listen = settings.listen.value_or("127.0.0.1:7070");
  config.metrics.listen = settings.metrics_listen.value_or("127.0.0.1:7071");
  config.state_dir = settings.state_dir.value_or(DefaultStateDir());
  config.insecure = settings.insecure.value_or(false);
  config.metrics.insecure = settings.insecure_metrics.value_or(false);
  config.health_listen = settings.health_listen.value_or("");
  if (settings.max_workers) config.workers.max_workers = *settings.max_workers;
  if (settings.register_rate) config.workers.register_rate_per_peer = *settings.register_rate;
  config.tls.cert_path = settings.tls_cert.value_or("");
  config.tls.key_path = settings.tls_key.value_or("");
  config.tls.client_ca_path = settings.tls_client_ca.value_or("");
  config.tokens_file = settings.tokens_file.value_or("");
  if (settings.max_request_bytes) config.max_receive_message_bytes = *settings.max_request_bytes;
  if (settings.max_world_size) config.jobs.max_world_size = *settings.max_world_size;
  if (settings.max_log_bytes_per_job) {
    config.jobs.max_log_bytes_per_job = *settings.max_log_bytes_per_job;
  }
  if (settings.rank_report_steps) config.store.rank_report_steps = *settings.rank_report_steps;
  if (settings.watch_replay_steps) config.jobs.watch_replay_steps = *settings.watch_replay_steps;
  if (settings.rendezvous_keys_per_rank) {
    config.rendezvous.max_keys_per_rank = *settings.rendezvous_keys_per_rank;
  }
  if (settings.rendezvous_value_bytes) {
    config.rendezvous.max_value_bytes = *settings.rendezvous_value_bytes;
  }
  if (settings.max_worker_memory) {
    absl::Status status =
        fsdpd::server::ParseMemoryCeilings(*settings.max_worker_memory, &config.workers);
    if (!status.ok()) return status;
  }
  if (settings.max_priority) {
    absl::Status status = fsdpd::server::ParsePriorityCaps(*settings.max_priority, &config.jobs);
    if (!status.ok()) return status;
  }
  if (settings.heartbeat_timeout) {
    absl::StatusOr<std::chrono::milliseconds> timeout =
        fsdpd::server::ParseDuration(*settings.heartbeat_timeout);
    if (!timeout.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("heartbeat-timeout: ", timeout.status().message()));
    }
    config.workers.heartbeat_timeout = *timeout;
    // Workers beat several times per timeout so one late beat is not a loss.
    config.workers.heartbeat_interval = std::max(std::chrono::milliseconds(1), *timeout / 5);
  }
  if (settings.metrics_retention) {
    absl::StatusOr<std::chrono::milliseconds> retention =
        fsdpd::server::ParseDuration(*settings.metrics_retention);
    if (!retention.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("metrics-retention: ", retention.status().message()));
    }
    config.metrics.retention = *retention;
  }
  if (settings.lost_worker_retention) {
    absl::StatusOr<std::chrono::milliseconds> retention =
        fsdpd::server::ParseDuration(*settings.lost_worker_retention);
    if (!retention.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("lost-worker-retention: ", retention.status().message()));
    }
    config.workers.lost_retention = *retention;
  }
  config.FillPaths();
  if (absl::Status status = config.Check(); !status.ok()) return status;
  return config;
}

// `fsdpd hash-token`: reads a token (first line of --token-file, or of stdin) and prints the
// tokens-file line for it, so the plain token never has to be written on the server.
int HashToken(const std::string& token_file, const std::string& role_name,
              const std::string& name) {
  std::string token;
  if (token_file.empty()) {
    std::getline(std::cin, token);
  } else {
    std::ifstream file(token_file);
    if (!file) {
      std::cerr << "fsdpd hash-token: cannot open " << token_file << "\n";
      return 2;
    }
    std::getline(file, token);
  }
  if (!token.empty() && token.back() == '\r') token.pop_back();
  absl::StatusOr<fsdpd::server::Role> role = fsdpd::server::ParseRole(role_name);
  if (!role.ok()) {
    std::cerr << "fsdpd hash-token: --role: " << role.status().message() << "\n";
    return 2;
  }
  absl::StatusOr<std::string> line = fsdpd::server::TokenLine(token, *role, name);
  if (!line.ok()) {
    std::cerr << "fsdpd hash-token: " << line.status().message() << "\n";
    return 2;
  }
  std::cout << *line << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Debian's Abseil is built without NDEBUG, so every absl::Mutex in gRPC would otherwise keep a
  // lock-order graph for deadlock detection: about 4% of the coordinator's CPU under load.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  // stdout carries only the "listening" line that scripts wait for; logs go to stderr.
  spdlog::set_default_logger(spdlog::stderr_color_mt("fsdpd"));
  CLI::App app{"fsdpd: the coordinator of fsdpd training jobs"};
  Settings flags;
  std::string config_file;
  std::string listen, metrics_listen, state_dir, heartbeat_timeout, metrics_retention,
      lost_worker_retention;
  int max_world_size = 0;
  int64_t max_log_bytes_per_job = 0;
  int64_t rank_report_steps = 0;
  int64_t watch_replay_steps = 0;
  bool insecure = false;
  auto* listen_option = app.add_option("--listen", listen, "gRPC address (127.0.0.1:7070)");
  auto* metrics_option =
      app.add_option("--metrics-listen", metrics_listen, "Prometheus /metrics (127.0.0.1:7071)");
  auto* state_option =
      app.add_option("--state-dir", state_dir,
                     "database and artifacts ($XDG_STATE_HOME/fsdpd, else ~/.local/state/fsdpd)");
  auto* heartbeat_option = app.add_option("--heartbeat-timeout", heartbeat_timeout,
                                          "a worker silent this long is lost (10s)");
  auto* retention_option =
      app.add_option("--metrics-retention", metrics_retention,
                     "how long a finished job's series stay on /metrics (5m; 0: remove at once)");
  auto* lost_retention_option = app.add_option(
      "--lost-worker-retention", lost_worker_retention,
      "how long a LOST worker stays listed (and alerted on) before it is forgotten (1h; at "
      "least --heartbeat-timeout)");
  auto* world_option =
      app.add_option("--max-world-size", max_world_size, "largest world_size accepted (1024)");
  auto* log_bytes_option = app.add_option(
      "--max-log-bytes-per-job", max_log_bytes_per_job,
      "log text stored per job; later lines are dropped after a marker line (268435456)");
  auto* rank_report_option = app.add_option(
      "--rank-report-steps", rank_report_steps,
      "per-rank step reports kept per job attempt: the newest this many steps (100000; 0: all)");
  auto* watch_replay_option = app.add_option(
      "--watch-replay-steps", watch_replay_steps,
      "aggregated steps a watch replays before following live: the newest this many (10000)");
  auto* insecure_flag =
      app.add_flag("--insecure", insecure, "allow a non-loopback --listen without TLS");
  std::string tls_cert, tls_key, tls_client_ca, tokens_file;
  int max_request_bytes = 0;
  auto* tls_cert_option =
      app.add_option("--tls-cert", tls_cert, "PEM certificate chain: serve TLS (with --tls-key)");
  auto* tls_key_option = app.add_option("--tls-key", tls_key, "PEM private key of --tls-cert");
  auto* tls_client_ca_option =
      app.add_option("--tls-client-ca", tls_client_ca,
                     "PEM CA: workers must present a client certificate it signed (mutual TLS)");
  auto* tokens_option = app.add_option(
      "--tokens-file", tokens_file,
      "lines `<sha256-hex> <role> <name>`: fsdpctl and workers (role worker) send these tokens");
  bool insecure_metrics = false;
  int max_workers = 0;
  double register_rate = 0;
  auto* insecure_metrics_flag = app.add_flag("--insecure-metrics", insecure_metrics,
                                             "allow a non-loopback --metrics-listen (plaintext)");
  auto* max_workers_option = app.add_option(
      "--max-workers", max_workers, "most workers known at once, lost ones included (4096)");
  auto* register_rate_option = app.add_option(
      "--register-rate", register_rate, "worker registrations a second per peer address (20)");
  auto* max_request_option = app.add_option("--max-request-bytes", max_request_bytes,
                                            "largest gRPC request accepted (4194304)");
  std::string health_listen;
  auto* health_option = app.add_option(
      "--health-listen", health_listen,
      "plaintext gRPC port serving only grpc.health.v1, for probes that cannot speak TLS (none)");
  int rendezvous_keys_per_rank = 0;
  int64_t rendezvous_value_bytes = 0;
  auto* rendezvous_keys_option =
      app.add_option("--rendezvous-keys-per-rank", rendezvous_keys_per_rank,
                     "keys an attempt's rendezvous scope holds per rank (8)");
  auto* rendezvous_value_option =
      app.add_option("--rendezvous-value-bytes", rendezvous_value_bytes,
                     "largest rendezvous value, plus 256 bytes per rank of the attempt (4096)");
  std::string max_worker_memory, max_priority;
  auto* max_worker_memory_option = app.add_option(
      "--max-worker-memory", max_worker_memory,
      "most memory admitted per worker whatever it claims: SIZE, or cpu=SIZE,cuda=SIZE (none)");
  auto* max_priority_option = app.add_option(
      "--max-priority", max_priority,
      "highest job priority per role: submitter=N,admin=N (submitter=100,admin=1000)");
  app.add_option("--config", config_file, "YAML file with the same keys as the flags")
      ->check(CLI::ExistingFile);

  std::string hash_token_file, hash_role = "viewer", hash_name;
  CLI::App* hash_token = app.add_subcommand(
      "hash-token", "print the --tokens-file line for a token read from stdin or --token-file");
  hash_token->add_option("--token-file", hash_token_file, "file whose first line is the token");
  hash_token->add_option("--role", hash_role, "worker, viewer, submitter or admin")
      ->capture_default_str();
  hash_token->add_option("--name", hash_name, "who the token belongs to")->required();
  CLI11_PARSE(app, argc, argv);
  if (hash_token->parsed()) return HashToken(hash_token_file, hash_role, hash_name);
  if (*listen_option) flags.listen = listen;
  if (*metrics_option) flags.metrics_listen = metrics_listen;
  if (*state_option) flags.state_dir = state_dir;
  if (*heartbeat_option) flags.heartbeat_timeout = heartbeat_timeout;
  if (*retention_option) flags.metrics_retention = metrics_retention;
  if (*lost_retention_option) flags.lost_worker_retention = lost_worker_retention;
  if (*world_option) flags.max_world_size = max_world_size;
  if (*log_bytes_option) flags.max_log_bytes_per_job = max_log_bytes_per_job;
  if (*rank_report_option) flags.rank_report_steps = rank_report_steps;
  if (*watch_replay_option) flags.watch_replay_steps = watch_replay_steps;
  if (*insecure_flag) flags.insecure = insecure;
  if (*tls_cert_option) flags.tls_cert = tls_cert;
  if (*tls_key_option) flags.tls_key = tls_key;
  if (*tls_client_ca_option) flags.tls_client_ca = tls_client_ca;
  if (*tokens_option) flags.tokens_file = tokens_file;
  if (*max_request_option) flags.max_request_bytes = max_request_bytes;
  if (*insecure_metrics_flag) flags.insecure_metrics = insecure_metrics;
  if (*max_workers_option) flags.max_workers = max_workers;
  if (*register_rate_option) flags.register_rate = register_rate;
  if (*health_option) flags.health_listen = health_listen;
  if (*rendezvous_keys_option) flags.rendezvous_keys_per_rank = rendezvous_keys_per_rank;
  if (*rendezvous_value_option) flags.rendezvous_value_bytes = rendezvous_value_bytes;
  if (*max_worker_memory_option) flags.max_worker_memory = max_worker_memory;
  if (*max_priority_option) flags.max_priority = max_priority;

  Settings settings;
  if (!config_file.empty()) {
    if (absl::Status status = LoadConfigFile(config_file, settings); !status.ok()) {
      std::cerr << "fsdpd: " << status.message() << "\n";
      return 2;
    }
  }
  ApplyEnvironment(settings);
  Overlay(flags, settings);
  absl::StatusOr<CoordinatorConfig> config = BuildConfig(settings);
  if (!config.ok()) {
    std::cerr << "fsdpd: " << config.status().message() << "\n";
    return 2;
  }

  // Signals are taken synchronously by this thread; every thread started later inherits the
  // mask, so none of them is interrupted.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  fsdpd::server::Coordinator coordinator(*config);
  if (absl::Status status = coordinator.Start(); !status.ok()) {
    std::cerr << "fsdpd: " << status.message() << "\n";
    return 1;
  }
  // Both addresses with the ports actually bound, so that port 0 (a port of the system's choice)
  // can be read back from the log.
  const std::string& metrics_requested = config->metrics.listen;
  const std::string metrics_address =
      metrics_requested.empty() || coordinator.metrics() == nullptr
          ? "(off)"
          : absl::StrCat(metrics_requested.substr(0, metrics_requested.rfind(':')), ":",
                         coordinator.metrics()->port());
  spdlog::info("state in {}, metrics on {}", config->state_dir, metrics_address);
  std::cout << "fsdpd listening on " << coordinator.listen_address() << std::endl;

  Notify("READY=1");

  // Waits for SIGTERM/SIGINT; with a systemd watchdog, wakes up to ping it in between.
  const std::chrono::microseconds watchdog = WatchdogPeriod();
  int received = 0;
  while (true) {
    if (watchdog.count() == 0) {
      if (sigwait(&signals, &received) == 0) break;
      continue;
    }
    timespec timeout{static_cast<time_t>(watchdog.count() / 1000000),
                     static_cast<long>(watchdog.count() % 1000000) * 1000};
    received = sigtimedwait(&signals, nullptr, &timeout);
    if (received > 0) break;
    Notify("WATCHDOG=1");
  }
  Notify("STOPPING=1");
  spdlog::info("{} received: shutting down", received == SIGTERM ? "SIGTERM" : "SIGINT");
  coordinator.Shutdown();
  spdlog::info("stopped");
  return 0;
}
