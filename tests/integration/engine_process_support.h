// Runs fsdpd-train ranks as separate processes for the engine's multi-process tests.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "nlohmann/json.hpp"

namespace fsdpd::testing {

struct RankRun {
  pid_t pid = -1;
  std::string stdout_path;
  std::string stderr_path;
};

inline std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Starts `binary args...` with stdout and stderr in files; `environment` entries are
// NAME=VALUE pairs added to the inherited environment.
inline RankRun Spawn(const std::string& binary, const std::vector<std::string>& args,
                     const std::string& output_prefix,
                     const std::vector<std::string>& environment = {}) {
  RankRun run;
  run.stdout_path = output_prefix + ".out";
  run.stderr_path = output_prefix + ".err";
  run.pid = ::fork();
  if (run.pid == 0) {
    int out = ::open(run.stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int err = ::open(run.stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(out, 1);
    ::dup2(err, 2);
    for (const std::string& entry : environment) ::putenv(const_cast<char*>(entry.c_str()));
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(binary.c_str()));
    for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);
    ::execv(binary.c_str(), argv.data());
    ::_exit(127);
  }
  return run;
}

// The exit status, 128 + signal for a signalled process, or -1 if it was still running at the
// deadline (it is then killed).
inline int WaitForExit(const RankRun& run, std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    int status = 0;
    const pid_t done = ::waitpid(run.pid, &status, WNOHANG);
    if (done == run.pid) {
      if (WIFEXITED(status)) return WEXITSTATUS(status);
      if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
      return -1;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(run.pid, SIGKILL);
      ::waitpid(run.pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// The JSON objects fsdpd-train printed, one per line.
inline std::vector<nlohmann::json> JsonLines(const std::string& path) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line[0] == '{') lines.push_back(nlohmann::json::parse(line));
  }
  return lines;
}

inline std::vector<double> Losses(const std::string& path) {
  std::vector<double> losses;
  for (const nlohmann::json& line : JsonLines(path)) {
    if (line.contains("step") && line.contains("loss")) losses.push_back(line["loss"]);
  }
  return losses;
}

inline std::vector<int64_t> Steps(const std::string& path) {
  std::vector<int64_t> steps;
  for (const nlohmann::json& line : JsonLines(path)) {
    if (line.contains("step")) steps.push_back(line["step"]);
  }
  return steps;
}

}  // namespace fsdpd::testing
