// A figure read on a thread of its own, so that a slow read (NVML's per-process memory query,
// about 0.18 ms on the H200) is not spent on the training thread between two steps while the
// device waits for the next step's work (bench/RESULTS.md, "Split master weights").
//
// Latest() returns the newest finished reading and asks for the next one; only the first call
// reads on the caller's thread (every call does where no thread can be started). Called once a
// step, each step gets the reading taken while the step before it ran: one step old, which for a
// figure that moves as slowly as a process's device memory is the price of not waiting for it.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>

namespace fsdpd {

template <typename T>
class BackgroundReading {
 public:
  explicit BackgroundReading(std::function<T()> read) : read_(std::move(read)) {}
  ~BackgroundReading() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_one();
    if (thread_.joinable()) thread_.join();
  }
  BackgroundReading(const BackgroundReading&) = delete;
  BackgroundReading& operator=(const BackgroundReading&) = delete;

  T Latest() {
    std::unique_lock<std::mutex> lock(mutex_);
    if (inline_) return read_();
    if (!thread_.joinable()) {
      lock.unlock();
      T first = read_();
      lock.lock();
      latest_ = std::move(first);
      try {
        thread_ = std::thread([this] { Run(); });
      } catch (const std::system_error&) {
        inline_ = true;  // the process is at its thread limit: every read on the caller's thread
        return latest_;
      }
    }
    requested_ = true;
    T latest = latest_;
    lock.unlock();
    wake_.notify_one();
    return latest;
  }

 private:
  void Run() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [this] { return requested_ || stopping_; });
      if (stopping_) return;
      requested_ = false;
      lock.unlock();
      T reading = read_();
      lock.lock();
      latest_ = std::move(reading);
    }
  }

  std::function<T()> read_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool requested_ = false;
  bool stopping_ = false;
  bool inline_ = false;
  T latest_{};
  std::thread thread_;
};

}  // namespace fsdpd
