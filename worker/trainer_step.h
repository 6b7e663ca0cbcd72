// One training step of one rank, and what it reports: RunTrainer (trainer.h) calls these in
// order, load → step → report → checkpoint → profile.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
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
#include "worker/rank_context.h"
#include "worker/step_batch.h"

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
  // The held-out data (DataSpec.eval_path) in batches of train.batch_size rows; null without
  // validation.
  std::unique_ptr<DataLoader> eval_data;
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
  std::optional<double> eval_loss;    // set by Validate on the steps that run it
};

// Loads the batch of `step` (train.grad_accum_steps micro-batches: `batch` holds them all, and
// engine.data gives them all, worker/data/accumulation_loader.h), runs forward and backward of
// each with the AdamW update once (in backward of the last micro-batch when
// `optimizer_in_backward`, after it otherwise, clipping to train.grad_clip), averages the loss
// over the micro-batches and the ranks and waits for the device. While a profiling window records,
// the step is one range of the trace.
absl::StatusOr<StepOutcome> TrainStep(Engine& engine, const v1::TrainSpec& train, int64_t step,
                                      bool optimizer_in_backward, StepBatch& batch);

// True when `step` runs validation: data.eval_every > 0 and held-out data to read, every
// eval_every steps and at the last step.
bool ValidationDue(const v1::JobSpec& spec, int64_t step);

// Validation after a step: the loss of engine.eval_data's batches 0 .. batches − 1 (each rank its
// rows of them, the same rows every time), forward only, averaged over the batches and the ranks.
// `tokens` is one batch's size.
absl::StatusOr<double> Validate(Engine& engine, int64_t batches, int64_t tokens);

// What a rank reports of one step (StepReport): throughput, exposed communication, MFU against
// `peak_flops`, the allocator's memory and the process's memory per `runtime`.
struct StepRates {
  int64_t tokens_per_rank_step = 0;  // every micro-batch's: tokens/s is per optimizer step
  double flops_per_token = 0.0;
  double peak_flops = 0.0;
};
v1::StepReport StepReportFor(const StepOutcome& outcome, const RankContext& context,
                             const StepRates& rates, const DeviceRuntime& runtime);

// The log line of a step, with the device's memory per its driver where the runtime has it.
std::string StepLogLine(const StepOutcome& outcome, const v1::StepReport& report,
                        const DeviceRuntime& runtime);

}  // namespace fsdpd
