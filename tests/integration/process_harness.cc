#include "tests/integration/process_harness.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "gtest/gtest.h"

namespace fsdpd::testing {
namespace {

using Clock = std::chrono::steady_clock;

std::string EnvironmentOr(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : fallback;
}

// Forks and execs argv with stdout and stderr sent to the given files.
pid_t Spawn(const std::vector<std::string>& argv, const std::string& out_path,
            const std::string& err_path) {
  std::vector<char*> raw;
  for (const std::string& arg : argv) raw.push_back(const_cast<char*>(arg.c_str()));
  raw.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    const int err =
        err_path == out_path ? out : open(err_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (out < 0 || err < 0) _exit(126);
    dup2(out, STDOUT_FILENO);
    dup2(err, STDERR_FILENO);
    const int null_input = open("/dev/null", O_RDONLY);
    if (null_input >= 0) dup2(null_input, STDIN_FILENO);
    execv(raw[0], raw.data());
    _exit(127);
  }
  return pid;
}

}  // namespace

void IsolateClientEnvironment(const std::string& home) {
  setenv("HOME", home.c_str(), 1);
  unsetenv("XDG_CONFIG_HOME");
  unsetenv("FSDPD_TOKEN_FILE");
  unsetenv("FSDPD_TLS_CA");
}

UnusedPort::UnusedPort() {
  fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof(address);
  // Bound, never listening: connections are refused, and without SO_REUSEADDR no other socket
  // can bind the port while this one holds it.
  if (fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    if (fd_ >= 0) close(fd_);
    throw std::runtime_error("cannot bind a TCP port on 127.0.0.1");
  }
  port_ = ntohs(address.sin_port);
}

UnusedPort::~UnusedPort() { close(fd_); }

std::string BuildPath(const std::string& relative) {
  return EnvironmentOr("FSDPD_BUILD_DIR", ".") + "/" + relative;
}

std::string SourcePath(const std::string& relative) {
  return EnvironmentOr("FSDPD_SOURCE_DIR", ".") + "/" + relative;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

ChildProcess::ChildProcess(std::vector<std::string> argv, std::string log_path)
    : log_path_(std::move(log_path)) {
  pid_ = Spawn(argv, log_path_, log_path_);
}

ChildProcess::ChildProcess(std::vector<std::string> argv, std::string out_path,
                           std::string log_path)
    : log_path_(std::move(log_path)) {
  pid_ = Spawn(argv, out_path, log_path_);
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0 && !reaped_) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

bool ChildProcess::Running() {
  if (pid_ <= 0 || reaped_) return false;
  if (waitpid(pid_, &wait_status_, WNOHANG) == pid_) reaped_ = true;
  return !reaped_;
}

void ChildProcess::Signal(int signal_number) {
  if (Running()) kill(pid_, signal_number);
}

int ChildProcess::exit_code() const {
  return reaped_ && WIFEXITED(wait_status_) ? WEXITSTATUS(wait_status_) : -1;
}

bool ChildProcess::WaitForExit(std::chrono::milliseconds timeout) {
  const Clock::time_point until = Clock::now() + timeout;
  while (Running()) {
    if (Clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

bool ChildProcess::WaitForLog(const std::string& text, std::chrono::milliseconds timeout) {
  const Clock::time_point until = Clock::now() + timeout;
  while (Clock::now() < until) {
    if (ReadFile(log_path_).find(text) != std::string::npos) return true;
    if (!Running()) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

std::string ChildProcess::WaitForAddress(const std::string& prefix,
                                         std::chrono::milliseconds timeout) {
  const Clock::time_point until = Clock::now() + timeout;
  while (Clock::now() < until) {
    const std::string log = ReadFile(log_path_);
    const size_t found = log.find(prefix);
    if (found != std::string::npos) {
      const size_t start = found + prefix.size();
      const size_t end = log.find_first_of(" \r\n", start);
      if (end != std::string::npos) return log.substr(start, end - start);
    }
    if (!Running()) return "";
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return "";
}

CommandResult RunCommand(const std::vector<std::string>& argv, std::chrono::milliseconds timeout) {
  TempDir capture;
  const std::string out_path = capture.path() + "/out";
  const std::string err_path = capture.path() + "/err";
  const pid_t pid = Spawn(argv, out_path, err_path);
  CommandResult result;
  const Clock::time_point until = Clock::now() + timeout;
  int status = 0;
  while (true) {
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (Clock::now() >= until) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.out = ReadFile(out_path);
  result.err = ReadFile(err_path);
  return result;
}

Cluster::Cluster(int workers) : worker_count_(workers) {
  state_dir_ = dir() + "/state";
  std::filesystem::create_directories(state_dir_);
  std::filesystem::create_directories(dir() + "/checkpoints");
}

Cluster::~Cluster() {
  workers_.clear();
  coordinator_.reset();
}

bool Cluster::StartCoordinator() {
  coordinator_.reset();
  const std::string log = dir() + "/fsdpd." + std::to_string(++coordinator_starts_) + ".log";
  coordinator_ = std::make_unique<ChildProcess>(
      std::vector<std::string>{BuildPath("server/fsdpd"), "--listen",
                               address_.empty() ? "127.0.0.1:0" : address_, "--metrics-listen",
                               "127.0.0.1:0", "--state-dir", state_dir_, "--heartbeat-timeout",
                               "5s"},
      log);
  const std::string bound =
      coordinator_->WaitForAddress("fsdpd listening on ", std::chrono::seconds(30));
  if (bound.empty()) {
    ADD_FAILURE() << "fsdpd did not start:\n" << ReadFile(log);
    return false;
  }
  address_ = bound;
  return true;
}

void Cluster::KillCoordinator(int signal_number) {
  if (!coordinator_) return;
  coordinator_->Signal(signal_number);
  coordinator_->WaitForExit(std::chrono::seconds(30));
}

void Cluster::FreezeCoordinator(std::chrono::milliseconds how_long) {
  if (!coordinator_) return;
  coordinator_->Signal(SIGSTOP);
  std::this_thread::sleep_for(how_long);
  coordinator_->Signal(SIGCONT);
}

bool Cluster::StartWorkers() {
  for (int i = 0; i < worker_count_; ++i) {
    const std::string log = dir() + "/worker" + std::to_string(i) + ".log";
    workers_.push_back(std::make_unique<ChildProcess>(
        std::vector<std::string>{BuildPath("worker/fsdpd-worker"), "--coordinator", address_,
                                 "--device", "cpu", "--checkpoint-root", dir() + "/checkpoints",
                                 "--hostname", "it-worker-" + std::to_string(i),
                                 "--heartbeat-interval", "500ms", "--allowed-root", dir()},
        log));
  }
  return WaitForWorkers(worker_count_, "IDLE", std::chrono::seconds(30));
}

bool Cluster::WaitForWorkers(int count, const std::string& state,
                             std::chrono::milliseconds timeout) {
  const Clock::time_point until = Clock::now() + timeout;
  while (Clock::now() < until) {
    CommandResult listed = Ctl({"--json", "workers"}, std::chrono::seconds(15));
    if (listed.exit_code == 0) {
      nlohmann::json parsed = nlohmann::json::parse(listed.out, nullptr, false);
      if (!parsed.is_discarded()) {
        int matching = 0;
        for (const auto& worker : parsed["workers"]) {
          if (worker.value("state", "") == state) ++matching;
        }
        if (matching == count) return true;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  ADD_FAILURE() << "the coordinator did not list " << count << " " << state << " workers\n"
                << Logs();
  return false;
}

CommandResult Cluster::Ctl(const std::vector<std::string>& args,
                           std::chrono::milliseconds timeout) {
  std::vector<std::string> argv{BuildPath("client/fsdpctl"), "--coordinator", address_};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(argv, timeout);
}

nlohmann::json Cluster::CtlJson(const std::vector<std::string>& args) {
  std::vector<std::string> full{"--json"};
  full.insert(full.end(), args.begin(), args.end());
  CommandResult result = Ctl(full);
  nlohmann::json parsed = nlohmann::json::parse(result.out, nullptr, false);
  if (result.exit_code != 0 || parsed.is_discarded()) {
    std::string joined;
    for (const std::string& arg : args) joined += " " + arg;
    ADD_FAILURE() << "fsdpctl" << joined << " exited " << result.exit_code
                  << "\nstdout: " << result.out << "\nstderr: " << result.err;
    return nullptr;
  }
  return parsed;
}

std::vector<nlohmann::json> Cluster::WatchEvents(const std::string& job_id, int* exit_code,
                                                 std::chrono::milliseconds timeout) {
  CommandResult result = Ctl({"--json", "watch", job_id}, timeout);
  *exit_code = result.exit_code;
  return ParseJsonLines(result.out);
}

std::unique_ptr<ChildProcess> Cluster::StartWatch(const std::string& job_id,
                                                  const std::string& out_path) {
  return std::make_unique<ChildProcess>(
      std::vector<std::string>{BuildPath("client/fsdpctl"), "--coordinator", address_, "--json",
                               "watch", job_id},
      out_path, out_path + ".err");
}

bool Cluster::WaitForWorkerLogs(const std::string& text, std::chrono::milliseconds timeout) {
  const Clock::time_point until = Clock::now() + timeout;
  for (auto& worker : workers_) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
    if (!worker->WaitForLog(text, std::max(left, std::chrono::milliseconds(0)))) return false;
  }
  return true;
}

std::vector<nlohmann::json> ParseJsonLines(const std::string& text) {
  std::vector<nlohmann::json> values;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    nlohmann::json value = nlohmann::json::parse(line, nullptr, false);
    if (value.is_discarded()) {
      ADD_FAILURE() << "a line that is not JSON: " << line;
      continue;
    }
    values.push_back(std::move(value));
  }
  return values;
}

std::string Cluster::WriteSpec(const std::string& name, const std::string& yaml) {
  const std::string path = dir() + "/" + name + ".yaml";
  WriteFile(path, yaml);
  return path;
}

std::string Cluster::SubmitJob(const std::string& spec_path) {
  nlohmann::json submitted = CtlJson({"submit", spec_path});
  if (submitted.is_null() || !submitted.contains("id") || !submitted["id"].is_string()) {
    ADD_FAILURE() << "submit printed no id: " << submitted.dump();
    return "";
  }
  return submitted["id"].get<std::string>();
}

nlohmann::json Cluster::Status(const std::string& job_id) { return CtlJson({"status", job_id}); }

nlohmann::json Cluster::WaitForJob(const std::string& job_id,
                                   const std::function<bool(const nlohmann::json&)>& predicate,
                                   std::chrono::milliseconds timeout) {
  const Clock::time_point until = Clock::now() + timeout;
  nlohmann::json status;
  while (true) {
    CommandResult result = Ctl({"--json", "status", job_id}, std::chrono::seconds(15));
    if (result.exit_code == 0) {
      nlohmann::json parsed = nlohmann::json::parse(result.out, nullptr, false);
      if (!parsed.is_discarded()) {
        status = parsed;
        if (predicate(status)) return status;
      }
    }
    if (Clock::now() >= until) return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

nlohmann::json Cluster::WaitForState(const std::string& job_id, const std::string& state,
                                     std::chrono::milliseconds timeout) {
  return WaitForJob(
      job_id, [&](const nlohmann::json& status) { return status.value("state", "") == state; },
      timeout);
}

std::string Cluster::Logs() const {
  std::ostringstream out;
  std::vector<std::filesystem::path> logs;
  for (const auto& entry : std::filesystem::directory_iterator(dir())) {
    if (entry.path().extension() == ".log") logs.push_back(entry.path());
  }
  std::sort(logs.begin(), logs.end());
  for (const auto& path : logs) {
    std::string text = ReadFile(path.string());
    // The end of a long log is where the failure is.
    if (text.size() > 6000) text = "...\n" + text.substr(text.size() - 6000);
    out << "==== " << path.filename().string() << "\n" << text << "\n";
  }
  return out.str();
}

std::string HashTokenLine(const std::string& dir, const std::string& token, const std::string& role,
                          const std::string& name) {
  const std::string token_file = dir + "/" + name + ".token";
  WriteFile(token_file, token + "\n");
  CommandResult result = RunCommand({BuildPath("server/fsdpd"), "hash-token", "--token-file",
                                     token_file, "--role", role, "--name", name},
                                    std::chrono::seconds(30));
  EXPECT_EQ(result.exit_code, 0) << result.err;
  return result.exit_code == 0 ? result.out : "";
}

std::string TinySpec(const std::string& name, int64_t steps, int world_size) {
  std::ostringstream yaml;
  yaml << "name: " << name << "\n"
       << "model: {vocab: 64, dim: 32, layers: 1, heads: 2, ffn_mult: 2}\n"
       << "data: {source: synthetic, seq_len: 16}\n"
       << "train: {batch_size: 2, steps: " << steps << ", lr: 1.0e-3, seed: 1}\n"
       << "parallel: {world_size: " << world_size
       << ", device: cpu, param_dtype: fp32, reduce_dtype: fp32}\n"
       << "checkpoint: {every_steps: 0}\n"
       << "profile: {steps: 0}\n"
       << "max_restarts: 0\n";
  return yaml.str();
}

}  // namespace fsdpd::testing
