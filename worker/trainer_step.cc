#include "worker/trainer_step.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "worker/optim/lr_schedule.h"
#include "worker/trainer_support.h"

namespace fsdpd {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

int64_t UnixMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

AdamWParams AdamWFor(const v1::TrainSpec& train, int64_t step) {
  AdamWParams adamw;
  adamw.lr = LearningRateAt(train, step);
  adamw.beta1 = train.beta1();
  adamw.beta2 = train.beta2();
  adamw.eps = train.eps();
  adamw.weight_decay = train.weight_decay();
  adamw.step = step;
  return adamw;
}

// Forward and backward of every micro-batch of the step (train.grad_accum_steps), their
// gradients summed in fp32 and reduce-scattered once, during the last one's backward
// (MicroBatch in worker/fsdp/fsdp_state.h), then the AdamW update. Returns this rank's loss: the
// mean of the micro-batches' mean losses, each over as many tokens.
absl::StatusOr<float> ForwardBackwardUpdate(Engine& engine, const v1::TrainSpec& train,
                                            const AdamWParams& adamw, bool optimizer_in_backward,
                                            StepBatch& batch, double* grad_norm) {
  ProfileRecorder* const recorder = engine.recorder.get();
  const int64_t count = std::max<int64_t>(train.grad_accum_steps(), 1);
  const int64_t tokens = static_cast<int64_t>(batch.inputs.size()) / count;
  double loss_sum = 0.0;
  for (MicroBatch micro{0, count}; micro.index < count; ++micro.index) {
    GradientShardConsumer* consumer = nullptr;
    if (optimizer_in_backward && micro.last()) {
      FSDPD_RETURN_IF_ERROR(engine.optimizer->BeginBackwardStep(adamw));
      consumer = engine.optimizer.get();
    }
    FSDPD_ASSIGN_OR_RETURN(const float micro_loss,
                           engine.state->ForwardBackward(
                               *engine.model, batch.inputs.data() + micro.index * tokens,
                               batch.targets.data() + micro.index * tokens, consumer, micro));
    loss_sum += micro_loss;
  }
  // One micro-batch: its loss as it is, to the bit.
  const float local_loss = count == 1 ? static_cast<float>(loss_sum)
                                      : static_cast<float>(loss_sum / static_cast<double>(count));
  if (optimizer_in_backward) {
    ProfileRange range(recorder, "", kPhaseOptimizer, "grad norm");
    FSDPD_ASSIGN_OR_RETURN(*grad_norm, engine.optimizer->FinishBackwardStep());
    return local_loss;
  }
  ProfileRange range(recorder, "", kPhaseOptimizer);
  FSDPD_ASSIGN_OR_RETURN(*grad_norm, engine.optimizer->Step(adamw, train.grad_clip()));
  return local_loss;
}

}  // namespace

absl::StatusOr<StepOutcome> TrainStep(Engine& engine, const v1::TrainSpec& train, int64_t step,
                                      bool optimizer_in_backward, StepBatch& batch) {
  ProfileRecorder* const recorder = engine.recorder.get();
  Backend& backend = *engine.backend;
  Communicator& communicator = *engine.communicator;
  const Clock::time_point step_start = Clock::now();
  const double comm_before = communicator.stats().blocked_seconds;
  std::optional<ProfileRange> step_range;
  if (recorder->active()) step_range.emplace(recorder, "", "", absl::StrCat("step ", step));

  {
    ProfileRange range(recorder, "", "", "data loader");
    FSDPD_RETURN_IF_ERROR(batch.Take(*engine.data, step - 1));
  }
  // The next step's batch, while the device runs this one (past the last step it is read and
  // never used). Not on the CPU backend: its step already keeps the host's cores busy, and
  // reading beside it made the demo's step 4% slower (bench/RESULTS.md).
  if (engine.backend->runs_beside_host()) batch.ReadAhead(*engine.data, step);
  StepOutcome outcome;
  outcome.step = step;
  const AdamWParams adamw = AdamWFor(train, step);
  outcome.lr = adamw.lr;
  std::vector<float> loss = {0.0f};
  FSDPD_ASSIGN_OR_RETURN(loss[0], ForwardBackwardUpdate(engine, train, adamw, optimizer_in_backward,
                                                        batch, &outcome.grad_norm));
  FSDPD_RETURN_IF_ERROR(engine.state->PrefetchRootForNextStep());
  // Every rank's loss is the mean over equally many tokens: their mean is the global mean (one
  // rank's is its own: no device round trip).
  if (communicator.world_size() > 1) {
    ProfileRange range(recorder, "", kPhaseComm, "loss all-reduce");
    FSDPD_RETURN_IF_ERROR(AllReduceHostFloats(communicator, backend, &loss, ReduceOp::kAverage));
  }
  FSDPD_RETURN_IF_ERROR(backend.compute_stream().Synchronize());
  step_range.reset();

  outcome.loss = loss[0];
  outcome.step_seconds = SecondsSince(step_start);
  outcome.exposed_comm_seconds = communicator.stats().blocked_seconds - comm_before;
  outcome.memory = backend.memory_stats();
  return outcome;
}

bool ValidationDue(const v1::JobSpec& spec, int64_t step) {
  const int64_t every = spec.data().eval_every();
  if (every <= 0 || spec.data().eval_path().empty()) return false;
  return step % every == 0 || step == spec.train().steps();
}

absl::StatusOr<double> Validate(Engine& engine, int64_t batches, int64_t tokens) {
  if (engine.eval_data == nullptr) {
    return absl::FailedPreconditionError("validation is due but the engine has no held-out data");
  }
  std::vector<int32_t> inputs(static_cast<size_t>(tokens));
  std::vector<int32_t> targets(static_cast<size_t>(tokens));
  double sum = 0.0;
  for (int64_t batch = 0; batch < batches; ++batch) {
    FSDPD_RETURN_IF_ERROR(engine.eval_data->Batch(batch, inputs.data(), targets.data()));
    FSDPD_ASSIGN_OR_RETURN(
        const float loss, engine.state->EvaluateLoss(*engine.model, inputs.data(), targets.data()));
    sum += loss;
  }
  // Every rank's mean is over equally many tokens: their mean is the global one.
  std::vector<float> mean = {static_cast<float>(sum / static_cast<double>(batches))};
  if (engine.communicator->world_size() > 1) {
    FSDPD_RETURN_IF_ERROR(
        AllReduceHostFloats(*engine.communicator, *engine.backend, &mean, ReduceOp::kAverage));
  }
  return mean[0];
}

v1::StepReport StepReportFor(const StepOutcome& outcome, const RankContext& context,
                             const StepRates& rates, const DeviceRuntime& runtime) {
  v1::StepReport report;
  report.set_job_id(context.job_id);
  report.set_attempt(context.attempt);
  report.set_rank(context.rank);
  report.set_step(outcome.step);
  report.set_loss(outcome.loss);
  report.set_tokens_per_second(rates.tokens_per_rank_step / std::max(outcome.step_seconds, 1e-9));
  report.set_step_seconds(outcome.step_seconds);
  report.set_exposed_comm_seconds(outcome.exposed_comm_seconds);
  report.set_compute_seconds(std::max(outcome.step_seconds - outcome.exposed_comm_seconds, 0.0));
  report.set_mfu_ratio(rates.flops_per_token * report.tokens_per_second() / rates.peak_flops);
  report.set_memory_current_bytes(outcome.memory.current_bytes);
  report.set_memory_peak_bytes(outcome.memory.peak_bytes);
  report.set_memory_reserved_bytes(outcome.memory.reserved_bytes);
  const MemoryInUse in_use = runtime.ProcessMemory();
  report.set_memory_device_used_bytes(in_use.bytes);
  report.set_memory_device_used_source(in_use.source);
  report.set_lr(outcome.lr);
  report.set_grad_norm(outcome.grad_norm);
  report.set_unix_millis(UnixMillis());
  if (outcome.eval_loss.has_value()) report.set_eval_loss(*outcome.eval_loss);
  return report;
}

std::string StepLogLine(const StepOutcome& outcome, const v1::StepReport& report,
                        const DeviceRuntime& runtime) {
  // On a GPU the allocator's peak leaves out the CUDA context, cuBLASLt and NCCL; the driver's
  // view (every process on the device) is logged beside it.
  std::string driver_note;
  if (std::optional<DriverMemory> driver = runtime.DeviceMemory()) {
    driver_note = absl::StrFormat(" (driver: %.1f MiB used of %.1f MiB)",
                                  driver->used_bytes / 1048576.0, driver->total_bytes / 1048576.0);
  }
  const std::string eval_note =
      outcome.eval_loss.has_value() ? absl::StrFormat(" | eval loss %.6f", *outcome.eval_loss) : "";
  return absl::StrFormat(
      "step %d | loss %.6f%s | lr %.3g | grad norm %.4g | %.0f tok/s | %.1f ms (comm %.1f ms) | "
      "peak %.1f MiB%s",
      outcome.step, outcome.loss, eval_note, outcome.lr, outcome.grad_norm,
      report.tokens_per_second(), outcome.step_seconds * 1e3, outcome.exposed_comm_seconds * 1e3,
      outcome.memory.peak_bytes / 1048576.0, driver_note);
}

}  // namespace fsdpd
