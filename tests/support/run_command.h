// Runs a shell command as a user would and collects what it printed (stdout and stderr
// together) and how it exited. For tests of command-line tools (fsdpd-edge, build tools).
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace fsdpd::testing {

struct CommandOutcome {
  int exit_code = -1;  // -1: did not exit normally (a crash, or the shell could not start)
  std::string output;  // stdout and stderr
};

// `command` runs under /bin/sh with stderr joined to stdout.
inline CommandOutcome RunCommand(const std::string& command) {
  CommandOutcome outcome;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return outcome;
  char buffer[4096];
  size_t read;
  while ((read = fread(buffer, 1, sizeof(buffer), pipe)) > 0) outcome.output.append(buffer, read);
  const int status = pclose(pipe);
  if (WIFEXITED(status)) outcome.exit_code = WEXITSTATUS(status);
  return outcome;
}

}  // namespace fsdpd::testing
