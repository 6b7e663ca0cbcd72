#include "worker/step_batch.h"

#include <system_error>
#include <utility>

namespace fsdpd {

StepBatch::~StepBatch() {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    WaitForReader(lock);
    stopping_ = true;
  }
  changed_.notify_all();
  if (reader_.joinable()) reader_.join();
}

void StepBatch::WaitForReader(std::unique_lock<std::mutex>& lock) {
  changed_.wait(lock, [this] { return loader_ == nullptr; });
}

absl::Status StepBatch::Take(DataLoader& loader, int64_t index) {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    WaitForReader(lock);
    if (have_next_ && next_index_ == index) {
      have_next_ = false;
      inputs.swap(next_inputs_);
      targets.swap(next_targets_);
      return std::exchange(next_status_, absl::OkStatus());
    }
    // Another batch than the one ahead (a resumed run, say): its failure is nobody's.
    have_next_ = false;
  }
  return loader.Batch(index, inputs.data(), targets.data());
}

void StepBatch::ReadAhead(DataLoader& loader, int64_t index) {
  std::unique_lock<std::mutex> lock(mutex_);
  WaitForReader(lock);
  if (no_thread_) return;
  if (!reader_.joinable()) {
    try {
      reader_ = std::thread([this] { Run(); });
    } catch (const std::system_error&) {
      no_thread_ = true;  // the process is at its thread limit
      return;
    }
  }
  loader_ = &loader;
  next_index_ = index;
  have_next_ = false;
  lock.unlock();
  changed_.notify_all();
}

void StepBatch::Run() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    changed_.wait(lock, [this] { return loader_ != nullptr || stopping_; });
    if (loader_ == nullptr) return;  // stopping, nothing asked for
    DataLoader* loader = loader_;
    const int64_t index = next_index_;
    lock.unlock();
    absl::Status read = loader->Batch(index, next_inputs_.data(), next_targets_.data());
    lock.lock();
    next_status_ = std::move(read);
    have_next_ = true;
    loader_ = nullptr;
    changed_.notify_all();
  }
}

}  // namespace fsdpd
