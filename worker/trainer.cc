// RunTrainer: one rank of one attempt, from the spec to the exported model.
#include "worker/trainer.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "proto/spec/job_spec.h"
#include "spdlog/spdlog.h"
#include "worker/backend/cpu_backend.h"
#include "worker/comm/communicator.h"
#include "worker/data/data_loader.h"
#include "worker/data/path_policy.h"
#include "worker/fsdp/fsdp_state.h"
#include "worker/fsdp/status_macros.h"
#include "worker/model/minillm.h"
#include "worker/optim/lr_schedule.h"
#include "worker/optim/sharded_adamw.h"
#include "worker/trainer_checkpoint.h"
#include "worker/trainer_support.h"
#include "worker/trainer_weights.h"

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

absl::Status CheckRunnable(const v1::JobSpec& spec, const RankContext& context) {
  std::vector<FieldError> errors = ValidateJobSpec(spec);
  if (!errors.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid job spec: ", FormatFieldErrors(errors)));
  }
  ENGINE_RETURN_IF_ERROR(ValidateLearningRateSchedule(spec.train()));
  if (spec.parallel().device() != "cpu" || context.device != "cpu") {
    return absl::UnimplementedError(absl::StrCat(
        "parallel.device '", spec.parallel().device(), "' on worker device '", context.device,
        "': this engine build trains on the CPU backend only (device: cpu); the CUDA backend "
        "is not available yet"));
  }
  if (context.world_size != spec.parallel().world_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the job asks for parallel.world_size ", spec.parallel().world_size(),
                     " but this rank was started in a world of ", context.world_size));
  }
  if (context.rank < 0 || context.rank >= context.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", context.rank, " is outside world size ", context.world_size));
  }
  if (context.world_size > 1 && context.store == nullptr) {
    return absl::InvalidArgumentError("a world of more than one rank needs a rendezvous store");
  }
  if (context.checkpoint_dir.empty()) {
    return absl::InvalidArgumentError("the rank context has no checkpoint directory");
  }
  const std::string& param_dtype = spec.parallel().param_dtype();
  if (param_dtype != "bf16" && param_dtype != "fp32") {
    return absl::InvalidArgumentError(
        absl::StrCat("parallel.param_dtype: must be 'bf16' or 'fp32' (got '", param_dtype, "')"));
  }
  if (spec.parallel().reduce_dtype() != "fp32" && !spec.parallel().reduce_dtype().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("parallel.reduce_dtype: only 'fp32' is supported (got '",
                     spec.parallel().reduce_dtype(), "')"));
  }
  return absl::OkStatus();
}

// One rank's engine: everything RunTrainer builds, in dependency order.
struct Engine {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Communicator> communicator;
  std::unique_ptr<MiniLLM> model;
  std::unique_ptr<FsdpState> state;
  std::unique_ptr<ShardedAdamW> optimizer;
  std::unique_ptr<DataLoader> data;
};

}  // namespace

absl::StatusOr<TrainResult> RunTrainer(const v1::JobSpec& spec, const RankContext& context,
                                       const TrainerHooks& hooks) {
  const std::string prefix = absl::StrCat("rank ", context.rank, ": ");
  auto log = [&](const std::string& level, const std::string& text) {
    if (level == "error") {
      spdlog::error("{}{}", prefix, text);
    } else if (level == "warning") {
      spdlog::warn("{}{}", prefix, text);
    } else {
      spdlog::info("{}{}", prefix, text);
    }
    if (hooks.on_log) hooks.on_log(level, text);
  };
  auto cancelled = [&] { return hooks.cancelled != nullptr && hooks.cancelled->load(); };

  ENGINE_RETURN_IF_ERROR(CheckRunnable(spec, context));
  ENGINE_ASSIGN_OR_RETURN(ModelConfig config, ModelConfigFromSpec(spec.model()));
  ENGINE_ASSIGN_OR_RETURN(const std::string job_dir,
                          ResolveConfinedPath(context.checkpoint_dir, context.allowed_roots));
  {
    std::error_code error;
    std::filesystem::create_directories(job_dir, error);
    if (error) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot create the checkpoint directory ", job_dir, ": ", error.message()));
    }
  }
  std::string init_path;
  if (!spec.checkpoint().init_from().empty()) {
    absl::StatusOr<std::string> resolved =
        ResolveConfinedPath(spec.checkpoint().init_from(), context.allowed_roots);
    if (!resolved.ok()) {
      return absl::Status(resolved.status().code(),
                          absl::StrCat("checkpoint.init_from: ", resolved.status().message()));
    }
    init_path = *resolved;
  }
  v1::DataSpec data_spec = spec.data();
  if (!data_spec.path().empty()) {
    absl::StatusOr<std::string> resolved =
        ResolveConfinedPath(data_spec.path(), context.allowed_roots);
    if (!resolved.ok()) {
      return absl::Status(resolved.status().code(),
                          absl::StrCat("data.path: ", resolved.status().message()));
    }
    data_spec.set_path(*resolved);
  }

  Engine engine;
  engine.backend = std::make_unique<CpuBackend>();
  Backend& backend = *engine.backend;

  CommunicatorOptions communicator_options;
  communicator_options.rank = context.rank;
  communicator_options.world_size = context.world_size;
  communicator_options.bind_address = context.bind_address;
  communicator_options.timeout = CommunicatorTimeout();
  ENGINE_ASSIGN_OR_RETURN(engine.communicator,
                          CreateCommunicator(communicator_options, context.store));
  Communicator& communicator = *engine.communicator;

  const int64_t batch = spec.train().batch_size();
  const int64_t seq = data_spec.seq_len();
  ENGINE_ASSIGN_OR_RETURN(engine.model, MiniLLM::Create(config, batch, seq, &backend));

  FsdpOptions fsdp_options;
  fsdp_options.reshard_after_forward = spec.parallel().reshard_after_forward();
  fsdp_options.param_storage_dtype = DType::kF32;
  fsdp_options.round_params_to_bf16 = spec.parallel().param_dtype() == "bf16";
  ENGINE_ASSIGN_OR_RETURN(engine.state, FsdpState::Create(engine.model->units(), &backend,
                                                          &communicator, fsdp_options));
  FsdpState& state = *engine.state;
  ENGINE_ASSIGN_OR_RETURN(engine.optimizer, ShardedAdamW::Create(&backend, &communicator, &state));

  DataLoaderOptions data_options;
  data_options.data = data_spec;
  data_options.vocab = config.vocab;
  data_options.batch_size = batch;
  data_options.rank = context.rank;
  data_options.world_size = context.world_size;
  data_options.seed = spec.train().seed();
  ENGINE_ASSIGN_OR_RETURN(engine.data, CreateDataLoader(data_options));

  // Initial weights first, so a resume overwrites them; a bad init file fails even on resume.
  if (!init_path.empty()) {
    ENGINE_RETURN_IF_ERROR(InitializeWeightsFromFile(init_path, state));
    log("info", absl::StrCat("initial weights from ", init_path));
  } else {
    ENGINE_RETURN_IF_ERROR(InitializeWeightsFromSeed(config, spec.train().seed(), state));
  }
  ENGINE_ASSIGN_OR_RETURN(const int64_t start_step,
                          ResumeFromCheckpoint(job_dir, state, communicator, backend, log));

  ENGINE_ASSIGN_OR_RETURN(const double peak_flops, PeakFlopsPerRank(backend));
  const double flops_per_token = FlopsPerToken(spec);
  const int64_t total_steps = spec.train().steps();
  const int64_t tokens_per_rank_step = batch * seq;
  log("info",
      absl::StrFormat("training %s: %d parameters, world %d, steps %d..%d, %d tokens/rank/step, "
                      "peak %.3g FLOP/s per rank for MFU",
                      spec.name(), ParameterCount(spec.model()), context.world_size, start_step + 1,
                      total_steps, tokens_per_rank_step, peak_flops));

  std::vector<int32_t> inputs(static_cast<size_t>(tokens_per_rank_step));
  std::vector<int32_t> targets(static_cast<size_t>(tokens_per_rank_step));
  TrainResult result;
  result.final_step = start_step;
  for (int64_t step = start_step + 1; step <= total_steps; ++step) {
    if (cancelled()) {
      communicator.Abort();
      log("info", absl::StrCat("cancelled before step ", step));
      return absl::CancelledError(absl::StrCat("cancelled before step ", step));
    }
    const Clock::time_point step_start = Clock::now();
    const double comm_before = communicator.stats().blocked_seconds;

    ENGINE_RETURN_IF_ERROR(engine.data->Batch(step - 1, inputs.data(), targets.data()));
    ENGINE_ASSIGN_OR_RETURN(const float local_loss,
                            state.ForwardBackward(*engine.model, inputs.data(), targets.data()));
    AdamWParams adamw;
    adamw.lr = LearningRateAt(spec.train(), step);
    adamw.beta1 = spec.train().beta1();
    adamw.beta2 = spec.train().beta2();
    adamw.eps = spec.train().eps();
    adamw.weight_decay = spec.train().weight_decay();
    adamw.step = step;
    ENGINE_ASSIGN_OR_RETURN(const double grad_norm,
                            engine.optimizer->Step(adamw, spec.train().grad_clip()));
    std::vector<float> loss = {local_loss};
    ENGINE_RETURN_IF_ERROR(AllReduceHostFloats(communicator, backend, &loss, ReduceOp::kAverage));
    ENGINE_RETURN_IF_ERROR(backend.compute_stream().Synchronize());

    const double step_seconds = SecondsSince(step_start);
    const double exposed_comm = communicator.stats().blocked_seconds - comm_before;
    const MemoryStats memory = backend.memory_stats();
    v1::StepReport report;
    report.set_job_id(context.job_id);
    report.set_attempt(context.attempt);
    report.set_rank(context.rank);
    report.set_step(step);
    report.set_loss(loss[0]);
    report.set_tokens_per_second(tokens_per_rank_step / std::max(step_seconds, 1e-9));
    report.set_step_seconds(step_seconds);
    report.set_exposed_comm_seconds(exposed_comm);
    report.set_compute_seconds(std::max(step_seconds - exposed_comm, 0.0));
    report.set_mfu_ratio(flops_per_token * report.tokens_per_second() / peak_flops);
    report.set_memory_current_bytes(memory.current_bytes);
    report.set_memory_peak_bytes(memory.peak_bytes);
    report.set_lr(adamw.lr);
    report.set_grad_norm(grad_norm);
    report.set_unix_millis(UnixMillis());
    if (hooks.on_step) hooks.on_step(report);
    if (step <= 3 || step % 10 == 0 || step == total_steps) {
      log("info",
          absl::StrFormat("step %d | loss %.6f | lr %.3g | grad norm %.4g | %.0f tok/s "
                          "| %.1f ms (comm %.1f ms) | peak %.1f MiB",
                          step, loss[0], adamw.lr, grad_norm, report.tokens_per_second(),
                          step_seconds * 1e3, exposed_comm * 1e3, memory.peak_bytes / 1048576.0));
    }
    if (!std::isfinite(loss[0])) {
      return absl::InternalError(absl::StrCat("the loss is not finite at step ", step));
    }
    result.final_step = step;
    result.final_loss = loss[0];

    const int64_t every = spec.checkpoint().every_steps();
    if (every > 0 && step % every == 0) {
      ENGINE_RETURN_IF_ERROR(SaveCheckpoint(job_dir, step, std::max(spec.checkpoint().keep(), 1),
                                            state, communicator, backend));
      log("info", absl::StrCat("checkpoint of step ", step, " committed"));
    }
  }

  ENGINE_ASSIGN_OR_RETURN(result.exported_model_path,
                          ExportConsolidatedModel(job_dir + "/model.safetensors", result.final_step,
                                                  state, communicator));
  if (!result.exported_model_path.empty()) {
    log("info", absl::StrCat("exported the model to ", result.exported_model_path));
  }
  return result;
}

}  // namespace fsdpd
