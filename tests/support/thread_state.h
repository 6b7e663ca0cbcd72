// Waits for another thread of this process to block (in a condition variable, a poll or a
// sleep), so that a test can act exactly when the code under test is waiting for it, instead of
// sleeping and hoping it is. Linux only: reads the thread's state from /proc.
#pragma once

#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>

namespace fsdpd::testing {

// The calling thread's kernel id, for WaitUntilBlocked.
inline pid_t CurrentThreadId() { return static_cast<pid_t>(syscall(SYS_gettid)); }

// The state letter of thread `tid` of this process ('R' running, 'S' asleep, ...); '\0' once
// the thread has exited.
inline char ThreadState(pid_t tid) {
  std::ifstream stat("/proc/self/task/" + std::to_string(tid) + "/stat");
  std::string text;
  if (!std::getline(stat, text)) return '\0';
  // "tid (comm) S ...": comm may hold spaces and parentheses, so the state follows the last ')'.
  const size_t close = text.rfind(')');
  return close == std::string::npos || close + 2 >= text.size() ? '\0' : text[close + 2];
}

// Polls until thread `tid` is asleep ('S'), and returns true; false if it exits or `timeout`
// passes first.
inline bool WaitUntilBlocked(pid_t tid, std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < until) {
    const char state = ThreadState(tid);
    if (state == 'S') return true;
    if (state == '\0') return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return false;
}

}  // namespace fsdpd::testing
