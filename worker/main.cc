// fsdpd-worker: one process per device. Registers with the coordinator and runs the ranks it
// is assigned until SIGINT or SIGTERM.
//
// Exit status: 0 after a signal, 1 for a fatal session error, 2 for bad flags, and 3 when an
// attempt did not end within --cancel-grace of its cancellation (the worker has reported itself
// unhealthy; its supervisor should start it afresh: systemd's Restart=on-failure, Kubernetes'
// container restart).
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "proto/bearer_token.h"
#include "spdlog/spdlog.h"
#include "worker/device/device_runtime.h"
#include "worker/session.h"
#include "worker/session_device.h"

namespace {

constexpr int kWedgedExitCode = 3;

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

int signal_pipe[2] = {-1, -1};

void ForwardSignal(int signal_number) {
  const unsigned char value = static_cast<unsigned char>(signal_number);
  // Nothing else is async-signal-safe enough to do here.
  [[maybe_unused]] ssize_t ignored = write(signal_pipe[1], &value, 1);
}

std::string DefaultCheckpointRoot() {
  const char* state_home = std::getenv("XDG_STATE_HOME");
  if (state_home != nullptr && *state_home != '\0') {
    return std::string(state_home) + "/fsdpd-worker/checkpoints";
  }
  const char* home = std::getenv("HOME");
  return std::string(home != nullptr ? home : ".") + "/.local/state/fsdpd-worker/checkpoints";
}

// Where jobs' data and init files must lie unless --allowed-root says otherwise: the worker's
// own data folder, so a job cannot read /etc/passwd by default. `--allowed-root /` allows all.
std::string DefaultDataRoot() {
  const char* data_home = std::getenv("XDG_DATA_HOME");
  if (data_home != nullptr && *data_home != '\0') {
    return std::string(data_home) + "/fsdpd-worker/data";
  }
  const char* home = std::getenv("HOME");
  return std::string(home != nullptr ? home : ".") + "/.local/share/fsdpd-worker/data";
}

std::string LocalHostname() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

}  // namespace

int main(int argc, char** argv) {
  // Debian's Abseil is built without NDEBUG, so every absl::Mutex in gRPC would otherwise keep a
  // lock-order graph for deadlock detection: about 4% of a process's CPU under load.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  fsdpd::WorkerConfig config;
  config.checkpoint_root = DefaultCheckpointRoot();
  config.hostname = LocalHostname();
  std::string heartbeat_interval = "1s";
  std::string cancel_grace = "60s";
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
  app.add_option("--cancel-grace", cancel_grace,
                 "how long a cancelled attempt may take to end before the worker reports itself "
                 "unhealthy and exits with status 3 (e.g. 60s)")
      ->envname("FSDPD_CANCEL_GRACE")
      ->capture_default_str();
  app.add_option("--allowed-root", config.allowed_roots,
                 "data and init paths of jobs must lie inside one of these (repeatable; "
                 "default: ~/.local/share/fsdpd-worker/data; `/` allows every path)");
  std::string tls_ca, tls_cert, tls_key;
  app.add_option("--tls-ca", tls_ca, "PEM CA that signed the coordinator's certificate: use TLS")
      ->envname("FSDPD_TLS_CA");
  app.add_option("--tls-cert", tls_cert, "PEM client certificate for mutual TLS")
      ->envname("FSDPD_TLS_CERT");
  app.add_option("--tls-key", tls_key, "PEM private key of --tls-cert")->envname("FSDPD_TLS_KEY");
  std::string token_file;
  app.add_option("--token-file", token_file,
                 "file whose first line is this worker's token (role worker in the "
                 "coordinator's --tokens-file)")
      ->envname("FSDPD_WORKER_TOKEN_FILE");
  app.add_option("--log-level", log_level, "trace, debug, info, warn or error")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  spdlog::set_level(spdlog::level::from_str(log_level));
  if (!ParseDuration(heartbeat_interval, &config.heartbeat_interval)) {
    std::cerr << "fsdpd-worker: --heartbeat-interval: \"" << heartbeat_interval
              << "\" is not a positive duration (e.g. 1s or 500ms)\n";
    return 2;
  }
  if (!ParseDuration(cancel_grace, &config.cancel_grace)) {
    std::cerr << "fsdpd-worker: --cancel-grace: \"" << cancel_grace
              << "\" is not a positive duration (e.g. 60s)\n";
    return 2;
  }
  if (absl::Status tls = fsdpd::LoadWorkerTls(tls_ca, tls_cert, tls_key, &config); !tls.ok()) {
    std::cerr << "fsdpd-worker: " << tls.message() << "\n";
    return 2;
  }
  if (!token_file.empty()) {
    if (absl::Status token = fsdpd::LoadTokenFile(token_file, &config.token); !token.ok()) {
      std::cerr << "fsdpd-worker: " << token.message() << "\n";
      return 2;
    }
  }
  if (config.allowed_roots.empty()) {
    const std::string root = DefaultDataRoot();
    std::error_code error;
    std::filesystem::create_directories(root, error);
    if (error) {
      std::cerr << "fsdpd-worker: cannot create the default data folder " << root << ": "
                << error.message() << " (pass --allowed-root)\n";
      return 2;
    }
    config.allowed_roots.push_back(root);
  }
  spdlog::info("job paths confined to {} (and the checkpoint root)",
               absl::StrJoin(config.allowed_roots, ", "));
  absl::Status valid = fsdpd::ValidateWorkerConfig(config);
  if (!valid.ok()) {
    std::cerr << "fsdpd-worker: " << valid.message() << "\n";
    return 2;
  }
  // The device is chosen here, once; the session registers what it describes.
  absl::StatusOr<std::unique_ptr<fsdpd::DeviceRuntime>> runtime =
      fsdpd::CreateDeviceRuntime(config.device);
  if (!runtime.ok()) {
    std::cerr << "fsdpd-worker: " << runtime.status().message() << "\n";
    return 2;
  }
  absl::StatusOr<fsdpd::DeviceInfo> device = fsdpd::ProbeDevice(**runtime);
  if (!device.ok()) {
    std::cerr << "fsdpd-worker: " << device.status().message() << "\n";
    return 2;
  }

  // Libraries start threads before main (OpenBLAS's pool), so a signal may land on any
  // thread: the handler only writes the signal number to a pipe that one thread reads.
  if (pipe(signal_pipe) != 0) {
    std::cerr << "fsdpd-worker: cannot create the signal pipe\n";
    return 1;
  }
  struct sigaction action {};
  action.sa_handler = ForwardSignal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  signal(SIGPIPE, SIG_IGN);

  fsdpd::WorkerSession session(config, *device);
  std::thread signal_waiter([&] {
    unsigned char received = 0;
    while (read(signal_pipe[0], &received, 1) < 0 && errno == EINTR) {
    }
    if (received != 0) {
      spdlog::info("received signal {}; shutting down", static_cast<int>(received));
      session.Shutdown();
    }
  });
  spdlog::info("fsdpd-worker: device {}, coordinator {}, checkpoints in {}", config.device,
               config.coordinator_address, config.checkpoint_root);
  absl::Status finished = session.Run();
  if (session.wedged()) {
    // A thread is blocked in the kernel for good; only a new process frees the worker. Nothing
    // is destroyed on the way out, since that thread still uses the session.
    spdlog::error("exiting with status {} for a fresh start", kWedgedExitCode);
    spdlog::default_logger()->flush();
    std::_Exit(kWedgedExitCode);
  }
  // Wakes the signal thread if Run returned on its own (a zero byte means no signal).
  const unsigned char wake = 0;
  if (write(signal_pipe[1], &wake, 1) < 0) std::cerr << "fsdpd-worker: signal pipe failed\n";
  signal_waiter.join();
  if (!finished.ok()) {
    spdlog::error("{}", std::string(finished.message()));
    return 1;
  }
  return 0;
}
