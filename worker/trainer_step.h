// One training step of one rank, and what it reports: RunTrainer (trainer.h) calls these in
// order, load → step → report → checkpoint → profile.
#pragma once

#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "fsdpd/v1/common.pb.h"
#include "fsdpd/v1/spec.pb.h"
#include "worker/backend/backend.h"
#include "worker/comm/communicator.h"
#include "worker/data/data_loader.h"
#include "worker/device/device_runtime.h"
#include "worker/fsdp/fsdp_state.h"
#include "worker/model/minillm.h"
#include "worker/optim/sharded_adamw.h"
#include "worker/profiler/profile_recorder.h"
#include "worker/trainer.h"

namespace fsdpd {

// One rank's engine: everything RunTrainer builds (BuildEngine in trainer.cc), in dependency
// order.
struct Engine {
  // Sees every op, copy and collective through the profiling decorators; records only in
  // windows.
  std::unique_ptr<ProfileRecorder> recorder;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Communicator> communicator;
  std::unique_ptr<MiniLLM> model;
  std::unique_ptr<FsdpState> state;
  std::unique_ptr<ShardedAdamW> optimizer;
  std::unique_ptr<DataLoader> data;
};

// The token ids of one rank's batch, reused by every step, and the next step's batch read on a
// helper thread while a device runs this step (a loader's batch is a pure function of the step, so
// reading ahead changes nothing; the trace showed the read, about 0.15 ms for the seed's
// synthetic batch, between two steps with the GPU idle). One read at a time: Take joins the one
// ahead before reading anything else, and the destructor joins it too.
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
  // Starts reading batch `index` on a helper thread. `loader` must outlive the read (the next
  // Take or the destructor).
  void ReadAhead(DataLoader& loader, int64_t index);

  std::vector<int32_t> inputs;
  std::vector<int32_t> targets;

 private:
  std::vector<int32_t> next_inputs_;
  std::vector<int32_t> next_targets_;
  std::future<absl::Status> next_;
  int64_t next_index_ = -1;
};

// What one step measured.
struct StepOutcome {
  int64_t step = 0;
  float loss = 0.0f;  // the mean over every rank's tokens
  double lr = 0.0;
  double grad_norm = 0.0;
  double step_seconds = 0.0;
  double exposed_comm_seconds = 0.0;  // the communicator's blocked time during the step
  MemoryStats memory;                 // the backend allocator's, after the step
};

// Loads the batch of `step`, runs forward and backward with the AdamW update (in backward when
// `optimizer_in_backward`, after it otherwise, clipping to train.grad_clip), averages the loss
// over the ranks and waits for the device. While a profiling window records, the step is one
// range of the trace.
absl::StatusOr<StepOutcome> TrainStep(Engine& engine, const v1::TrainSpec& train, int64_t step,
                                      bool optimizer_in_backward, StepBatch& batch);

// What a rank reports of one step (StepReport): throughput, exposed communication, MFU against
// `peak_flops`, the allocator's memory and the process's memory per `runtime`.
struct StepRates {
  int64_t tokens_per_rank_step = 0;
  double flops_per_token = 0.0;
  double peak_flops = 0.0;
};
v1::StepReport StepReportFor(const StepOutcome& outcome, const RankContext& context,
                             const StepRates& rates, const DeviceRuntime& runtime);

// The log line of a step, with the device's memory per its driver where the runtime has it.
std::string StepLogLine(const StepOutcome& outcome, const v1::StepReport& report,
                        const DeviceRuntime& runtime);

}  // namespace fsdpd
