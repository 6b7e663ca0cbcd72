// RunTrainer: one rank of one attempt, from the spec to the exported model.
#include "worker/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/path_component.h"
#include "base/status_macros.h"
#include "proto/spec/job_spec.h"
#include "spdlog/spdlog.h"
#include "worker/checkpoint/consolidate.h"
#include "worker/comm/communicator.h"
#include "worker/data/accumulation_loader.h"
#include "worker/data/data_loader.h"
#include "worker/data/path_policy.h"
#include "worker/device/device_runtime.h"
#include "worker/fsdp/fsdp_state.h"
#include "worker/model/minillm.h"
#include "worker/optim/lr_schedule.h"
#include "worker/optim/sharded_adamw.h"
#include "worker/profiler/profile_recorder.h"
#include "worker/profiler/profiling_backend.h"
#include "worker/profiler/profiling_communicator.h"
#include "worker/trainer_checkpoint.h"
#include "worker/trainer_profiling.h"
#include "worker/trainer_step.h"
#include "worker/trainer_support.h"
#include "worker/trainer_weights.h"

namespace fsdpd {
namespace {

// The spec was validated once, where it entered (ValidateJobSpec: the coordinator at submission,
// fsdpd-train after reading its file), and is trusted here. What is checked is what only this
// rank knows: whether its device runs the spec's, and whether its context fits the spec's world.
absl::Status CheckRunnable(const v1::JobSpec& spec, const RankContext& context) {
  FSDPD_RETURN_IF_ERROR(CheckDevice(spec.parallel().device(), context.device));
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
  return absl::OkStatus();
}

// Paths from the spec and context, resolved and confined to context.allowed_roots.
struct JobPaths {
  std::string job_dir;
  std::string init_path;  // empty: PyTorch's initialisation from train.seed
  // checkpoint.init_from_job_uid: that job's checkpoint folder, a sibling of this job's under
  // the checkpoint root (empty: none), and the step to start from.
  std::string init_job_dir;
  int64_t init_step = 0;
  v1::DataSpec data;  // with its path resolved
};

// The folder of the job whose checkpoint this one starts from: <checkpoint root>/<uid>, where
// the root is the folder that holds this job's own (RankContext::checkpoint_dir), confined like
// every other path.
absl::Status ResolveInitJob(const v1::CheckpointSpec& checkpoint, const RankContext& context,
                            JobPaths& paths) {
  const std::string& uid = checkpoint.init_from_job_uid();
  if (uid.empty()) return absl::OkStatus();
  FSDPD_RETURN_IF_ERROR(CheckPathComponent("checkpoint.init_from_job_uid", uid));
  if (checkpoint.init_from_step() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint.init_from_job_uid ", uid,
                     " needs checkpoint.init_from_step, a committed step"));
  }
  const std::filesystem::path root = std::filesystem::path(paths.job_dir).parent_path();
  FSDPD_ASSIGN_OR_RETURN(paths.init_job_dir,
                         ResolveConfinedPath((root / uid).string(), context.allowed_roots));
  paths.init_step = checkpoint.init_from_step();
  return absl::OkStatus();
}

absl::StatusOr<JobPaths> ResolveJobPaths(const v1::JobSpec& spec, const RankContext& context) {
  JobPaths paths;
  FSDPD_ASSIGN_OR_RETURN(paths.job_dir,
                         CreateConfinedDirectory(context.checkpoint_dir, context.allowed_roots));
  FSDPD_ASSIGN_OR_RETURN(const v1::JobSpec resolved, ResolveSpecPaths(spec, context.allowed_roots));
  paths.init_path = resolved.checkpoint().init_from();
  FSDPD_RETURN_IF_ERROR(ResolveInitJob(spec.checkpoint(), context, paths));
  paths.data = resolved.data();
  return paths;
}

// One optimizer step's tokens on this rank: every micro-batch's.
int64_t TokensPerRankStep(const v1::JobSpec& spec) {
  return spec.train().batch_size() * std::max<int64_t>(spec.train().grad_accum_steps(), 1) *
         spec.data().seq_len();
}

// Clipping needs the global norm before any unit is updated, so it keeps the step after backward.
bool OptimizerInBackward(const v1::JobSpec& spec, const RankContext& context) {
  return context.optimizer_in_backward && spec.train().grad_clip() <= 0.0;
}

// The runtime's backend and communicator, each behind its profiling decorator, and the recorder
// they share.
absl::Status AttachDevice(const RankContext& context, const DeviceRuntime& runtime,
                          Engine& engine) {
  engine.recorder = std::make_unique<ProfileRecorder>();
  FSDPD_ASSIGN_OR_RETURN(std::unique_ptr<Backend> device_backend, runtime.CreateBackend());
  std::unique_ptr<StreamWaitTimer> wait_timer = runtime.CreateStreamWaitTimer(*device_backend);
  auto profiling_backend = std::make_unique<ProfilingBackend>(
      std::move(device_backend), engine.recorder.get(), std::move(wait_timer));
  ProfilingBackend* const timed_backend = profiling_backend.get();
  engine.backend = std::move(profiling_backend);
  CommunicatorOptions communicator_options;
  communicator_options.rank = context.rank;
  communicator_options.world_size = context.world_size;
  communicator_options.bind_address = context.bind_address;
  if (context.collective_timeout.count() > 0) {
    communicator_options.timeout = context.collective_timeout;
  } else {
    FSDPD_ASSIGN_OR_RETURN(communicator_options.timeout, CommunicatorTimeout());
  }
  FSDPD_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> communicator,
                         runtime.CreateCommunicator(communicator_options, context.store));
  engine.communicator = std::make_unique<ProfilingCommunicator>(
      std::move(communicator), engine.recorder.get(), timed_backend);
  return absl::OkStatus();
}

// `log` names the steps that may block, before each (the coordinator's SCHEDULED deadline and
// the worker's watchdog name the last one); `cancelled` stops the data file's scan.
absl::StatusOr<Engine> BuildEngine(const v1::JobSpec& spec, const RankContext& context,
                                   const DeviceRuntime& runtime, const ModelConfig& config,
                                   const v1::DataSpec& data, const EngineLog& log,
                                   const std::atomic<bool>* cancelled) {
  Engine engine;
  FSDPD_RETURN_IF_ERROR(AttachDevice(context, runtime, engine));
  const int64_t batch = spec.train().batch_size();
  FSDPD_ASSIGN_OR_RETURN(engine.model,
                         MiniLLM::Create(config, batch, data.seq_len(), engine.backend.get()));
  FsdpOptions fsdp_options;
  fsdp_options.reshard_after_forward = spec.parallel().reshard_after_forward();
  const bool bf16_params = spec.parallel().param_dtype() == "bf16";
  if (engine.backend->activation_dtype() == DType::kBF16) {
    // The CUDA kernels read bf16 parameters, gathered in bf16 (half the bytes on the wire):
    // the master's high halves (a split master), or the fp32 master cast into this rank's
    // slice of the unsharded buffer. The spec's validator refuses param_dtype fp32 for device
    // cuda at submission.
    fsdp_options.param_storage_dtype = DType::kBF16;
    fsdp_options.round_params_to_bf16 = false;
    FSDPD_ASSIGN_OR_RETURN(fsdp_options.split_master, SplitMaster());
  } else {
    // The CPU backend computes in fp32: bf16 parameters are fp32 storage rounded through bf16.
    fsdp_options.param_storage_dtype = DType::kF32;
    fsdp_options.round_params_to_bf16 = bf16_params;
  }
  fsdp_options.profiler = engine.recorder.get();
  fsdp_options.transient_grad_shards = OptimizerInBackward(spec, context);
  FSDPD_ASSIGN_OR_RETURN(const bool optimizer_on_comm_stream, OptimizerOnCommStream());
  fsdp_options.optimizer_on_comm_stream =
      fsdp_options.transient_grad_shards && optimizer_on_comm_stream;
  FSDPD_ASSIGN_OR_RETURN(fsdp_options.prefetch_units, PrefetchUnits());
  FSDPD_ASSIGN_OR_RETURN(engine.state,
                         FsdpState::Create(engine.model->units(), engine.backend.get(),
                                           engine.communicator.get(), fsdp_options));
  FSDPD_ASSIGN_OR_RETURN(
      engine.optimizer,
      ShardedAdamW::Create(engine.backend.get(), engine.communicator.get(), engine.state.get()));
  DataLoaderOptions data_options;
  data_options.data = data;
  data_options.vocab = config.vocab;
  data_options.batch_size = batch;
  data_options.rank = context.rank;
  data_options.world_size = context.world_size;
  data_options.seed = spec.train().seed();
  data_options.allowed_roots = context.allowed_roots;
  data_options.cancelled = cancelled;
  if (!data.path().empty() && data.source() != "synthetic") {
    log("info", absl::StrCat("opening data.path '", data.path(), "'"));
  }
  FSDPD_ASSIGN_OR_RETURN(std::unique_ptr<DataLoader> micro_batches, CreateDataLoader(data_options));
  engine.data = AccumulationLoader(std::move(micro_batches), spec.train().grad_accum_steps(),
                                   batch * data.seq_len());
  if (data.eval_every() > 0 && !data.eval_path().empty()) {
    DataLoaderOptions eval_options = data_options;
    eval_options.data.set_path(data.eval_path());
    log("info", absl::StrCat("opening data.eval_path '", data.eval_path(), "'"));
    FSDPD_ASSIGN_OR_RETURN(engine.eval_data, CreateDataLoader(eval_options));
  }
  return engine;
}

// A log line of this rank: to spdlog, with the rank, and to hooks.on_log.
EngineLog RankLog(int rank, std::function<void(const std::string&, const std::string&)> on_log) {
  return [prefix = absl::StrCat("rank ", rank, ": "), on_log = std::move(on_log)](
             const std::string& level, const std::string& text) {
    if (level == "error") {
      spdlog::error("{}{}", prefix, text);
    } else if (level == "warning") {
      spdlog::warn("{}{}", prefix, text);
    } else {
      spdlog::info("{}{}", prefix, text);
    }
    if (on_log) on_log(level, text);
  };
}

// What Load gives the loop: the engine with its weights, and where the run starts.
struct LoadedRun {
  JobPaths paths;
  Engine engine;
  int64_t start_step = 0;  // the last step already trained (0: none)
  double peak_flops = 0.0;
  CheckpointIdentity checkpoint_identity;  // written into, and checked against, manifests
};

// Another job's committed checkpoint as this job's initial weights: every rank reads all of the
// origin's rank files and keeps its own slices (the world sizes may differ). Master weights
// only: the optimizer starts fresh. A checkpoint that is missing, corrupt or of another model
// fails the job for good (FAILED_PRECONDITION): retrying cannot bring it back.
absl::Status LoadWeightsFromJob(const JobPaths& paths, const v1::CheckpointSpec& checkpoint,
                                const ModelConfig& config, FsdpState& state, const EngineLog& log) {
  const std::string& uid = checkpoint.init_from_job_uid();
  log("info", absl::StrCat("loading the checkpoint of step ", paths.init_step, " of job ", uid,
                           " from ", paths.init_job_dir));
  absl::StatusOr<ConsolidatedCheckpoint> origin =
      ConsolidateCheckpoint(paths.init_job_dir, paths.init_step, config);
  if (!origin.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint.init_from_job_uid: ", origin.status().message()));
  }
  if (!origin->job_uid.empty() && origin->job_uid != uid) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint.init_from_job_uid: the checkpoint of step ", paths.init_step, " in ",
        paths.init_job_dir, " belongs to job ", origin->job_uid, ", not ", uid));
  }
  FSDPD_RETURN_IF_ERROR(InitializeWeightsFromTensors(
      origin->tensors, "checkpoint.init_from_job_uid",
      absl::StrCat("the checkpoint of step ", paths.init_step, " in ", paths.init_job_dir), state));
  log("info", absl::StrCat("initial weights from step ", paths.init_step, " of job ", uid,
                           " (written at world size ", origin->world_size, ")"));
  return absl::OkStatus();
}

// Initial weights first, so a resume overwrites them; a bad init file fails even on resume.
absl::Status LoadWeights(const v1::JobSpec& spec, const ModelConfig& config, LoadedRun& run,
                         const EngineLog& log) {
  FsdpState& state = *run.engine.state;
  if (!run.paths.init_job_dir.empty()) {
    FSDPD_RETURN_IF_ERROR(LoadWeightsFromJob(run.paths, spec.checkpoint(), config, state, log));
  } else if (!run.paths.init_path.empty()) {
    log("info", absl::StrCat("loading checkpoint.init_from '", run.paths.init_path, "'"));
    FSDPD_RETURN_IF_ERROR(InitializeWeightsFromFile(run.paths.init_path, state));
    log("info", absl::StrCat("initial weights from ", run.paths.init_path));
  } else {
    FSDPD_ASSIGN_OR_RETURN(const WeightInitTimes times,
                           InitializeWeightsFromSeed(config, spec.train().seed(), state));
    log("info", absl::StrFormat("initial weights drawn from seed %d in %.1f s, loaded into the "
                                "shards in %.1f s",
                                spec.train().seed(), times.draw_seconds, times.load_seconds));
  }
  FSDPD_ASSIGN_OR_RETURN(run.start_step,
                         ResumeFromCheckpoint(run.paths.job_dir, run.checkpoint_identity, state,
                                              *run.engine.communicator, *run.engine.backend, log));
  return absl::OkStatus();
}

// Builds the engine on the runtime's device and loads its weights (from a checkpoint when
// there is one).
absl::StatusOr<LoadedRun> Load(const v1::JobSpec& spec, const RankContext& context,
                               const DeviceRuntime& runtime, const EngineLog& log,
                               const std::atomic<bool>* cancelled) {
  LoadedRun run;
  ModelConfig config = ModelConfigFromSpec(spec.model());
  FSDPD_ASSIGN_OR_RETURN(config.activation_recompute,
                         ParseActivationRecompute(spec.parallel().activation_recompute()));
  FSDPD_ASSIGN_OR_RETURN(config.matmul_dtype, ParseMatmulDtype(spec.parallel().matmul_dtype()));
  FSDPD_ASSIGN_OR_RETURN(run.paths, ResolveJobPaths(spec, context));
  const auto building = std::chrono::steady_clock::now();
  FSDPD_ASSIGN_OR_RETURN(
      run.engine, BuildEngine(spec, context, runtime, config, run.paths.data, log, cancelled));
  log("info",
      absl::StrFormat(
          "engine built in %.1f s (shards, optimizer state, data, communicator)",
          std::chrono::duration<double>(std::chrono::steady_clock::now() - building).count()));
  run.checkpoint_identity =
      CheckpointIdentityFor(spec, context.job_uid, context.attempt, context.world_size);
  FSDPD_RETURN_IF_ERROR(LoadWeights(spec, config, run, log));
  FSDPD_ASSIGN_OR_RETURN(run.peak_flops, runtime.PeakFlops(*run.engine.backend));
  log("info",
      absl::StrFormat("training %s: %d parameters, world %d, steps %d..%d, %d tokens/rank/step "
                      "(%d micro-batches), peak %.3g FLOP/s per rank for MFU",
                      spec.name(), ParameterCount(spec.model()), context.world_size,
                      run.start_step + 1, spec.train().steps(), TokensPerRankStep(spec),
                      spec.train().grad_accum_steps(), run.peak_flops));
  return run;
}

// Offers hooks.set_abort a way to abort the communicator while it lives.
class AbortOffer {
 public:
  AbortOffer(const TrainerHooks& hooks, Communicator& communicator) : hooks_(hooks) {
    if (hooks_.set_abort) hooks_.set_abort([&communicator] { communicator.Abort(); });
  }
  ~AbortOffer() {
    if (hooks_.set_abort) hooks_.set_abort(nullptr);
  }
  AbortOffer(const AbortOffer&) = delete;
  AbortOffer& operator=(const AbortOffer&) = delete;

 private:
  const TrainerHooks& hooks_;
};

// Between steps: a cancelled run aborts its collectives and ends with CANCELLED.
absl::Status StopIfCancelled(const TrainerHooks& hooks, int64_t step, Communicator& communicator,
                             const EngineLog& log) {
  if (hooks.cancelled == nullptr || !hooks.cancelled->load()) return absl::OkStatus();
  communicator.Abort();
  log("info", absl::StrCat("cancelled before step ", step));
  return absl::CancelledError(absl::StrCat("cancelled before step ", step));
}

// The first steps, every tenth and the last are logged.
bool LoggedStep(int64_t step, int64_t total_steps) {
  return step <= 3 || step % 10 == 0 || step == total_steps;
}

// Rank 0 tells hooks.on_checkpoint of a step it committed, even when the collective after the
// commit then failed (a cancellation aborts it): the checkpoint is on disk. One it cannot
// describe is only logged (it is listed with the next one's committed steps).
void ReportCommitted(const LoadedRun& run, int64_t step, const EngineLog& log,
                     const TrainerHooks& hooks) {
  const Communicator& communicator = *run.engine.communicator;
  if (communicator.rank() != 0 || !hooks.on_checkpoint) return;
  if (!ReadCheckpointIdentity(run.paths.job_dir, step).ok()) return;  // no manifest: not committed
  absl::StatusOr<v1::CheckpointCommitted> committed =
      DescribeCommittedCheckpoint(run.paths.job_dir, step, communicator.world_size());
  if (committed.ok()) {
    hooks.on_checkpoint(*committed);
  } else {
    log("warning", absl::StrCat("cannot describe the checkpoint of step ", step, ": ",
                                committed.status().message()));
  }
}

// Every checkpoint.every_steps steps (0: never), keeping the newest checkpoint.keep.
absl::Status CheckpointIfDue(const v1::JobSpec& spec, int64_t step, LoadedRun& run,
                             const EngineLog& log, const TrainerHooks& hooks) {
  const int64_t every = spec.checkpoint().every_steps();
  if (every <= 0 || step % every != 0) return absl::OkStatus();
  log("info", absl::StrCat("writing the checkpoint of step ", step));
  const absl::Status saved = SaveCheckpoint(
      run.paths.job_dir, run.checkpoint_identity, step, std::max(spec.checkpoint().keep(), 1),
      *run.engine.state, *run.engine.communicator, *run.engine.backend, hooks.cancelled);
  ReportCommitted(run, step, log, hooks);
  FSDPD_RETURN_IF_ERROR(saved);
  log("info", absl::StrCat("checkpoint of step ", step, " committed"));
  return absl::OkStatus();
}

// The consolidated model with PyTorch's names, written by rank 0.
absl::Status ExportModel(LoadedRun& run, const EngineLog& log, TrainResult* result) {
  FSDPD_ASSIGN_OR_RETURN(result->exported_model_path,
                         ExportConsolidatedModel(run.paths.job_dir + "/model.safetensors",
                                                 result->final_step, run.engine.model->config(),
                                                 *run.engine.state, *run.engine.communicator));
  if (!result->exported_model_path.empty()) {
    log("info", absl::StrCat("exported the model to ", result->exported_model_path));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TrainResult> RunTrainer(const v1::JobSpec& spec, const RankContext& context,
                                       const TrainerHooks& hooks) {
  const EngineLog log = RankLog(context.rank, hooks.on_log);
  FSDPD_RETURN_IF_ERROR(CheckRunnable(spec, context));
  FSDPD_ASSIGN_OR_RETURN(const std::unique_ptr<DeviceRuntime> runtime,
                         CreateDeviceRuntime(context.device));
  FSDPD_ASSIGN_OR_RETURN(LoadedRun run, Load(spec, context, *runtime, log, hooks.cancelled));
  const AbortOffer abort_offer(hooks, *run.engine.communicator);
  TrainerProfiling profiling(spec, context, hooks, *runtime, run.engine.recorder.get(),
                             run.engine.backend->name(), run.peak_flops, log);
  const bool optimizer_in_backward = OptimizerInBackward(spec, context);
  log("info", optimizer_in_backward
                  ? "AdamW runs in backward, one unit at a time (no gradient clipping)"
                  : "AdamW runs after backward");

  StepRates rates;
  rates.tokens_per_rank_step = TokensPerRankStep(spec);
  rates.flops_per_token = FlopsPerToken(spec);
  rates.peak_flops = run.peak_flops;
  StepBatch batch(rates.tokens_per_rank_step);
  const int64_t total_steps = spec.train().steps();
  TrainResult result;
  result.final_step = run.start_step;
  for (int64_t step = run.start_step + 1; step <= total_steps; ++step) {
    FSDPD_RETURN_IF_ERROR(StopIfCancelled(hooks, step, *run.engine.communicator, log));
    profiling.BeginStep(step);
    FSDPD_ASSIGN_OR_RETURN(StepOutcome outcome,
                           TrainStep(run.engine, spec.train(), step, optimizer_in_backward, batch));
    if (ValidationDue(spec, step)) {
      // After the step's update and outside its timing: the report carries both losses.
      ProfileRange range(run.engine.recorder.get(), "", "", "validation");
      FSDPD_ASSIGN_OR_RETURN(outcome.eval_loss,
                             Validate(run.engine, spec.data().eval_batches(),
                                      spec.train().batch_size() * run.paths.data.seq_len()));
    }
    // The host's work between two steps, while the device waits, shows in a profile's trace.
    v1::StepReport report;
    {
      ProfileRange range(run.engine.recorder.get(), "", "", "report");
      report = StepReportFor(outcome, context, rates, *runtime);
    }
    {
      ProfileRange range(run.engine.recorder.get(), "", "", "report hooks");
      if (hooks.on_step) hooks.on_step(report);
    }
    profiling.EndStep(step);
    if (LoggedStep(step, total_steps) || outcome.eval_loss.has_value()) {
      log("info", StepLogLine(outcome, report, *runtime));
    }
    if (!std::isfinite(outcome.loss)) {
      return absl::InternalError(absl::StrCat("the loss is not finite at step ", step));
    }
    result.final_step = step;
    result.final_loss = outcome.loss;
    FSDPD_RETURN_IF_ERROR(CheckpointIfDue(spec, step, run, log, hooks));
  }
  profiling.Finish();
  FSDPD_RETURN_IF_ERROR(ExportModel(run, log, &result));
  return result;
}

}  // namespace fsdpd
