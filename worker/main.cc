// fsdpd-worker: one process per device. Registers with the coordinator and runs the ranks it
// is assigned until SIGINT or SIGTERM.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "spdlog/spdlog.h"
#include "worker/session.h"

namespace {

// Accepts "1s", "500ms", "2m" or a plain number of seconds.
bool ParseDuration(const std::string& text, std::chrono::milliseconds* out) {
  double value = 0;
  double scale = 1000.0;
  std::string number = text;
  if (absl::EndsWith(text, "ms")) {
    number = text.substr(0, text.size() - 2);
    scale = 1.0;
  } else if (absl::EndsWith(text, "s")) {
    number = text.substr(0, text.size() - 1);
  } else if (absl::EndsWith(text, "m")) {
    number = text.substr(0, text.size() - 1);
    scale = 60000.0;
  }
  if (!absl::SimpleAtod(number, &value) || value <= 0) return false;
  *out = std::chrono::milliseconds(static_cast<int64_t>(value * scale));
  return out->count() > 0;
}

std::string DefaultCheckpointRoot() {
  const char* state_home = std::getenv("XDG_STATE_HOME");
  if (state_home != nullptr && *state_home != '\0') {
    return std::string(state_home) + "/fsdpd-worker/checkpoints";
  }
  const char* home = std::getenv("HOME");
  return std::string(home != nullptr ? home : ".") + "/.local/state/fsdpd-worker/checkpoints";
}

std::string LocalHostname() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

}  // namespace

int main(int argc, char** argv) {
  fsdpd::WorkerConfig config;
  config.checkpoint_root = DefaultCheckpointRoot();
  config.hostname = LocalHostname();
  std::string heartbeat_interval = "1s";
  std::string log_level = "info";

  CLI::App app{"fsdpd-worker: runs the ranks of training jobs that the fsdpd coordinator assigns"};
  app.add_option("--coordinator", config.coordinator_address, "coordinator address host:port")
      ->envname("FSDPD_COORDINATOR")
      ->capture_default_str();
  app.add_option("--device", config.device, "cpu or cuda:N")->capture_default_str();
  app.add_option("--checkpoint-root", config.checkpoint_root,
                 "checkpoints go to <root>/<job id>; ranks of a job must share it")
      ->capture_default_str();
  app.add_option("--hostname", config.hostname, "name reported to the coordinator")
      ->capture_default_str();
  app.add_option("--address", config.address, "address peers reach this worker on")
      ->capture_default_str();
  app.add_option("--heartbeat-interval", heartbeat_interval, "e.g. 1s or 500ms")
      ->capture_default_str();
  app.add_option("--allowed-root", config.allowed_roots,
                 "data and init paths of jobs must lie inside one of these (repeatable)");
  app.add_option("--log-level", log_level, "trace, debug, info, warn or error")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  spdlog::set_level(spdlog::level::from_str(log_level));
  if (!ParseDuration(heartbeat_interval, &config.heartbeat_interval)) {
    std::cerr << "fsdpd-worker: --heartbeat-interval: \"" << heartbeat_interval
              << "\" is not a positive duration (e.g. 1s or 500ms)\n";
    return 2;
  }
  absl::Status valid = fsdpd::ValidateWorkerConfig(config);
  if (!valid.ok()) {
    std::cerr << "fsdpd-worker: " << valid.message() << "\n";
    return 2;
  }
  absl::StatusOr<fsdpd::DeviceInfo> device = fsdpd::ProbeDevice(config.device);
  if (!device.ok()) {
    std::cerr << "fsdpd-worker: " << device.status().message() << "\n";
    return 2;
  }

  // Signals are taken by one thread with sigwait, so the others never run a handler.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  fsdpd::WorkerSession session(config, *device);
  std::atomic<bool> signalled{false};
  std::thread signal_waiter([&] {
    int received = 0;
    sigwait(&signals, &received);
    signalled.store(true);
    if (received != 0) {
      spdlog::info("received signal {}; shutting down", received);
      session.Shutdown();
    }
  });
  spdlog::info("fsdpd-worker: device {}, coordinator {}, checkpoints in {}", config.device,
               config.coordinator_address, config.checkpoint_root);
  absl::Status finished = session.Run();
  // Wakes the signal thread if Run returned on its own.
  if (!signalled.load()) kill(getpid(), SIGTERM);
  signal_waiter.join();
  if (!finished.ok()) {
    spdlog::error("{}", std::string(finished.message()));
    return 1;
  }
  return 0;
}
