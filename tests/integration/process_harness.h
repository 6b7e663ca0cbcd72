// Starts real fsdpd, fsdpd-worker and fsdpctl processes on loopback for the integration tests.
// Every process is killed and every temporary directory removed when its owner goes away.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "tests/support/temp_dir.h"

namespace fsdpd::testing {

// A TCP port on 127.0.0.1 that nothing listens on while this object lives: it keeps the port
// bound without listening, so a connection to it is refused and no server can take it. (A port
// found free and then closed may be taken by anyone before it is used.) A server under test
// picks its own port instead: --listen 127.0.0.1:0, then WaitForListenAddress.
class UnusedPort {
 public:
  UnusedPort();  // throws std::runtime_error when no port can be bound
  ~UnusedPort();
  UnusedPort(const UnusedPort&) = delete;
  UnusedPort& operator=(const UnusedPort&) = delete;
  int port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// Points HOME at `home` and clears XDG_CONFIG_HOME, FSDPD_TOKEN_FILE and FSDPD_TLS_CA, so that
// fsdpctl and workers started by the test pick up no token or CA from the real environment.
void IsolateClientEnvironment(const std::string& home);

// <FSDPD_BUILD_DIR>/<relative>, e.g. "server/fsdpd".
std::string BuildPath(const std::string& relative);
std::string SourcePath(const std::string& relative);

std::string ReadFile(const std::string& path);
void WriteFile(const std::string& path, const std::string& text);

// A child process whose stdout and stderr go to a log file.
class ChildProcess {
 public:
  ChildProcess(std::vector<std::string> argv, std::string log_path);
  // stdout to `out_path`, stderr to `log_path`.
  ChildProcess(std::vector<std::string> argv, std::string out_path, std::string log_path);
  ~ChildProcess();  // SIGKILL, then reaps it
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  bool Running();
  void Signal(int signal_number);
  // Returns false if it is still running after `timeout`.
  bool WaitForExit(std::chrono::milliseconds timeout);
  // Waits until the log contains `text`; false on timeout or if the process exits first.
  bool WaitForLog(const std::string& text, std::chrono::milliseconds timeout);
  const std::string& log_path() const { return log_path_; }
  // Waits until the log has a line "<prefix><address>" (fsdpd prints "fsdpd listening on
  // HOST:PORT" with the port it bound) and returns the address; "" on timeout or if the process
  // exits first.
  std::string WaitForAddress(const std::string& prefix, std::chrono::milliseconds timeout);
  pid_t pid() const { return pid_; }
  // The exit status once it has exited and been reaped (by Running or WaitForExit); -1 while it
  // runs or when a signal ended it.
  int exit_code() const;

 private:
  std::string log_path_;
  pid_t pid_ = -1;
  bool reaped_ = false;
  int wait_status_ = 0;
};

struct CommandResult {
  int exit_code = -1;  // -1: killed on timeout or by a signal
  std::string out;
  std::string err;
};

// One JSON value a line (fsdpctl --json watch); a line that is not JSON fails the test.
std::vector<nlohmann::json> ParseJsonLines(const std::string& text);

CommandResult RunCommand(const std::vector<std::string>& argv, std::chrono::milliseconds timeout);

// One coordinator and a number of CPU workers, all on loopback, with their own state.
class Cluster {
 public:
  explicit Cluster(int workers);
  ~Cluster();

  // Starts (or restarts, on the same port and state dir) the coordinator and waits until it
  // serves. Returns false, with the log in the test output, if it does not. The first start
  // listens on port 0 and reads back the port fsdpd bound; a restart binds that port again, so
  // that running workers find it (/metrics takes a port of its own each start).
  bool StartCoordinator();
  void KillCoordinator(int signal_number);
  // Stops the coordinator (SIGSTOP) for `how_long`, then lets it go on: a process starved of CPU.
  void FreezeCoordinator(std::chrono::milliseconds how_long);
  // The state folder the next StartCoordinator uses (default <dir>/state): a new one is a new
  // cluster, as after a lost volume or a fresh install beside workers that outlive it.
  void UseStateDir(const std::string& state_dir) { state_dir_ = state_dir; }
  bool StartWorkers();
  // Waits until the coordinator lists `count` workers in `state` (e.g. "IDLE").
  bool WaitForWorkers(int count, const std::string& state, std::chrono::milliseconds timeout);

  // fsdpctl --coordinator ADDR <args>.
  CommandResult Ctl(const std::vector<std::string>& args,
                    std::chrono::milliseconds timeout = std::chrono::seconds(60));
  // fsdpctl --json <args>, with its output parsed; null (and a test failure) if it failed.
  nlohmann::json CtlJson(const std::vector<std::string>& args);
  // Every line of `fsdpctl --json watch ID`, and its exit code.
  // fsdpctl --json watch <job_id> in the background, its events going to `out_path` as they
  // come (ParseJsonLines reads them).
  std::unique_ptr<ChildProcess> StartWatch(const std::string& job_id, const std::string& out_path);
  // Waits until the log of every worker contains `text`.
  bool WaitForWorkerLogs(const std::string& text, std::chrono::milliseconds timeout);
  std::vector<nlohmann::json> WatchEvents(const std::string& job_id, int* exit_code,
                                          std::chrono::milliseconds timeout);

  // Writes a spec file into the cluster's directory and returns its path.
  std::string WriteSpec(const std::string& name, const std::string& yaml);
  std::string SubmitJob(const std::string& spec_path);  // the id, or "" (and a test failure)
  nlohmann::json Status(const std::string& job_id);
  // Polls status until `predicate` holds; returns the last status either way.
  nlohmann::json WaitForJob(const std::string& job_id,
                            const std::function<bool(const nlohmann::json&)>& predicate,
                            std::chrono::milliseconds timeout);
  nlohmann::json WaitForState(const std::string& job_id, const std::string& state,
                              std::chrono::milliseconds timeout);

  // Every process's log, for a failure message.
  std::string Logs() const;
  const std::string& address() const { return address_; }
  const std::string& dir() const { return dir_.path(); }

 private:
  TempDir dir_;
  int worker_count_;
  std::string address_;  // empty until the coordinator's first start
  std::string state_dir_;
  std::unique_ptr<ChildProcess> coordinator_;
  int coordinator_starts_ = 0;
  std::vector<std::unique_ptr<ChildProcess>> workers_;
};

// The tokens-file line `fsdpd hash-token` prints for `token` (written to a file in `dir`),
// with its newline; "" and a test failure if the command fails.
std::string HashTokenLine(const std::string& dir, const std::string& token, const std::string& role,
                          const std::string& name);

// A MiniLLM spec small enough to train in seconds on two cores.
std::string TinySpec(const std::string& name, int64_t steps, int world_size = 2);

}  // namespace fsdpd::testing
