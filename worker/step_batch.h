// The token ids of one rank's batch, reused by every step, and the next step's batch read on a
// reader thread while a device runs this step (a loader's batch is a pure function of the step, so
// reading ahead changes nothing; the trace showed the read, about 0.1 ms for the seed's synthetic
// batch, between two steps with the GPU idle). The thread is started once and kept: starting one
// a step cost about 0.1 ms of its own there (bench/RESULTS.md). One read at a time: Take and
// ReadAhead wait for the one ahead before touching the buffers, and the destructor joins it.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "worker/data/data_loader.h"

namespace fsdpd {

class StepBatch {
 public:
  explicit StepBatch(int64_t tokens)
      : inputs(static_cast<size_t>(tokens)),
        targets(static_cast<size_t>(tokens)),
        next_inputs_(static_cast<size_t>(tokens)),
        next_targets_(static_cast<size_t>(tokens)) {}
  ~StepBatch();
  StepBatch(const StepBatch&) = delete;
  StepBatch& operator=(const StepBatch&) = delete;

  // Fills inputs and targets with `loader`'s batch `index`: the one read ahead when it is that
  // one (its error, if it failed), else read now.
  absl::Status Take(DataLoader& loader, int64_t index);
  // Starts reading batch `index` on the reader thread. `loader` must outlive the read (the next
  // Take or the destructor). Where no thread can be started, nothing is read ahead and Take
  // reads the batch itself.
  void ReadAhead(DataLoader& loader, int64_t index);

  std::vector<int32_t> inputs;
  std::vector<int32_t> targets;

 private:
  void Run();
  // Waits, with `lock` held on mutex_, until no read is asked for or under way.
  void WaitForReader(std::unique_lock<std::mutex>& lock);

  std::vector<int32_t> next_inputs_;
  std::vector<int32_t> next_targets_;
  std::mutex mutex_;
  std::condition_variable changed_;
  DataLoader* loader_ = nullptr;  // non-null: a read asked for and not finished
  int64_t next_index_ = -1;
  bool have_next_ = false;  // next_* hold batch next_index_ (or next_status_ its error)
  absl::Status next_status_;
  bool stopping_ = false;
  bool no_thread_ = false;  // the process had no thread to give: reads are inline
  std::thread reader_;
};

}  // namespace fsdpd
