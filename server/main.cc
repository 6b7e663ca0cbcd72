// fsdpd: the coordinator. Settings come from, in increasing precedence: defaults, the --config
// YAML file, the environment (FSDPD_LISTEN, FSDPD_METRICS_LISTEN, FSDPD_STATE_DIR), and flags.
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
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
  std::optional<int> max_world_size;
  std::optional<bool> insecure;
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
// max-world-size, insecure.
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
      } else if (key == "max-world-size") {
        settings.max_world_size = entry.second.as<int>();
      } else if (key == "insecure") {
        settings.insecure = entry.second.as<bool>();
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("--config ", path, ": unknown key \"", key,
                         "\" (known: listen, metrics-listen, state-dir, heartbeat-timeout, "
                         "max-world-size, insecure)"));
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
  if (from.max_world_size) onto.max_world_size = from.max_world_size;
  if (from.insecure) onto.insecure = from.insecure;
}

absl::StatusOr<CoordinatorConfig> BuildConfig(const Settings& settings) {
  CoordinatorConfig config;
  config.listen = settings.listen.value_or("127.0.0.1:7070");
  config.metrics.listen = settings.metrics_listen.value_or("127.0.0.1:7071");
  config.state_dir = settings.state_dir.value_or(DefaultStateDir());
  config.insecure = settings.insecure.value_or(false);
  if (settings.max_world_size) config.jobs.max_world_size = *settings.max_world_size;
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
  config.FillPaths();
  if (absl::Status status = config.Check(); !status.ok()) return status;
  return config;
}

}  // namespace

int main(int argc, char** argv) {
  // stdout carries only the "listening" line that scripts wait for; logs go to stderr.
  spdlog::set_default_logger(spdlog::stderr_color_mt("fsdpd"));
  CLI::App app{"fsdpd: the coordinator of fsdpd training jobs"};
  Settings flags;
  std::string config_file;
  std::string listen, metrics_listen, state_dir, heartbeat_timeout;
  int max_world_size = 0;
  bool insecure = false;
  auto* listen_option = app.add_option("--listen", listen, "gRPC address (127.0.0.1:7070)");
  auto* metrics_option =
      app.add_option("--metrics-listen", metrics_listen, "Prometheus /metrics (127.0.0.1:7071)");
  auto* state_option =
      app.add_option("--state-dir", state_dir, "database and artifacts ($XDG_STATE_HOME/fsdpd)");
  auto* heartbeat_option = app.add_option("--heartbeat-timeout", heartbeat_timeout,
                                          "a worker silent this long is lost (10s)");
  auto* world_option =
      app.add_option("--max-world-size", max_world_size, "largest world_size accepted (1024)");
  auto* insecure_flag =
      app.add_flag("--insecure", insecure, "allow a non-loopback --listen without TLS");
  app.add_option("--config", config_file, "YAML file with the same keys as the flags")
      ->check(CLI::ExistingFile);
  CLI11_PARSE(app, argc, argv);
  if (*listen_option) flags.listen = listen;
  if (*metrics_option) flags.metrics_listen = metrics_listen;
  if (*state_option) flags.state_dir = state_dir;
  if (*heartbeat_option) flags.heartbeat_timeout = heartbeat_timeout;
  if (*world_option) flags.max_world_size = max_world_size;
  if (*insecure_flag) flags.insecure = insecure;

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
  spdlog::info("state in {}, metrics on {}", config->state_dir,
               config->metrics.listen.empty() ? "(off)" : config->metrics.listen);
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
