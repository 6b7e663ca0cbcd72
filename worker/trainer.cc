// RunTrainer: one rank of one attempt, from the spec to the exported model.
#include "worker/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "proto/spec/job_spec.h"
#include "spdlog/spdlog.h"
#include "worker/backend/cpu_backend.h"
#include "worker/comm/communicator.h"
#include "worker/data/data_loader.h"
#include "worker/data/path_policy.h"
#include "worker/fsdp/fsdp_state.h"
#include "worker/model/minillm.h"
#include "worker/optim/lr_schedule.h"
#include "worker/optim/sharded_adamw.h"
#include "worker/profiler/profile_recorder.h"
#include "worker/profiler/profile_window.h"
#include "worker/profiler/profiling_backend.h"
#include "worker/profiler/profiling_communicator.h"
#include "worker/trainer_checkpoint.h"
#ifdef FSDPD_HAS_CUDA
#include "worker/trainer_device.h"
#endif
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

// The job's device kind must be the worker's: `cpu` on --device cpu, `cuda` on cuda:N.
absl::Status CheckDevice(const std::string& job_device, const std::string& worker_device) {
  if (job_device == "cpu" && worker_device == "cpu") return absl::OkStatus();
#ifdef FSDPD_HAS_CUDA
  if (job_device == "cuda" && ParseCudaDevice(worker_device).ok()) return absl::OkStatus();
  const char* supported = "device: cpu on a cpu worker, or device: cuda on a cuda:N worker";
#else
  const char* supported =
      "device: cpu only (this build has no CUDA backend; rebuild with -DFSDPD_CUDA=ON)";
#endif
  // UNIMPLEMENTED: this worker cannot run such a job, though another worker may.
  return absl::UnimplementedError(absl::StrCat("parallel.device '", job_device,
                                               "' cannot run on worker device '", worker_device,
                                               "': this engine runs ", supported));
}

absl::Status CheckRunnable(const v1::JobSpec& spec, const RankContext& context) {
  std::vector<FieldError> errors = ValidateJobSpec(spec);
  if (!errors.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid job spec: ", FormatFieldErrors(errors)));
  }
  FSDPD_RETURN_IF_ERROR(ValidateLearningRateSchedule(spec.train()));
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

// Paths from the spec and context, resolved and confined to context.allowed_roots.
struct JobPaths {
  std::string job_dir;
  std::string init_path;  // empty: PyTorch's initialisation from train.seed
  v1::DataSpec data;      // with its path resolved
};

absl::StatusOr<std::string> ResolveField(const char* field, const std::string& path,
                                         const RankContext& context) {
  absl::StatusOr<std::string> resolved = ResolveConfinedPath(path, context.allowed_roots);
  if (!resolved.ok()) {
    return absl::Status(resolved.status().code(),
                        absl::StrCat(field, ": ", resolved.status().message()));
  }
  return resolved;
}

absl::StatusOr<JobPaths> ResolveJobPaths(const v1::JobSpec& spec, const RankContext& context) {
  JobPaths paths;
  FSDPD_ASSIGN_OR_RETURN(paths.job_dir,
                         ResolveField("checkpoint directory", context.checkpoint_dir, context));
  std::error_code error;
  std::filesystem::create_directories(paths.job_dir, error);
  if (error) {
    return absl::FailedPreconditionError(absl::StrCat("cannot create the checkpoint directory ",
                                                      paths.job_dir, ": ", error.message()));
  }
  if (!spec.checkpoint().init_from().empty()) {
    FSDPD_ASSIGN_OR_RETURN(paths.init_path, ResolveField("checkpoint.init_from",
                                                         spec.checkpoint().init_from(), context));
  }
  paths.data = spec.data();
  if (!paths.data.path().empty()) {
    FSDPD_ASSIGN_OR_RETURN(const std::string data_path,
                           ResolveField("data.path", paths.data.path(), context));
    paths.data.set_path(data_path);
  }
  return paths;
}

// Clipping needs the global norm before any unit is updated, so it keeps the step after backward.
bool OptimizerInBackward(const v1::JobSpec& spec, const RankContext& context) {
  return context.optimizer_in_backward && spec.train().grad_clip() <= 0.0;
}

// One rank's engine: everything RunTrainer builds, in dependency order.
struct Engine {
  // Sees every op, copy and collective through the decorators below; records only in windows.
  std::unique_ptr<ProfileRecorder> recorder;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Communicator> communicator;
  std::unique_ptr<MiniLLM> model;
  std::unique_ptr<FsdpState> state;
  std::unique_ptr<ShardedAdamW> optimizer;
  std::unique_ptr<DataLoader> data;
};

absl::StatusOr<Engine> BuildEngine(const v1::JobSpec& spec, const RankContext& context,
                                   const ModelConfig& config, const v1::DataSpec& data) {
  Engine engine;
  engine.recorder = std::make_unique<ProfileRecorder>();
  const bool on_cuda = spec.parallel().device() == "cuda";
  std::unique_ptr<Backend> device_backend;
  if (!on_cuda) device_backend = std::make_unique<CpuBackend>();
#ifdef FSDPD_HAS_CUDA
  int cuda_device = 0;
  if (on_cuda) {
    FSDPD_ASSIGN_OR_RETURN(cuda_device, ParseCudaDevice(context.device));
    FSDPD_ASSIGN_OR_RETURN(device_backend, CreateCudaBackend(cuda_device));
  }
#endif
  auto profiling_backend =
      std::make_unique<ProfilingBackend>(std::move(device_backend), engine.recorder.get());
  ProfilingBackend* const timed_backend = profiling_backend.get();
  engine.backend = std::move(profiling_backend);
  CommunicatorOptions communicator_options;
  communicator_options.rank = context.rank;
  communicator_options.world_size = context.world_size;
  communicator_options.bind_address = context.bind_address;
  communicator_options.timeout =
      context.collective_timeout.count() > 0 ? context.collective_timeout : CommunicatorTimeout();
  std::unique_ptr<Communicator> communicator;
#ifdef FSDPD_HAS_CUDA
  if (on_cuda) {
    FSDPD_ASSIGN_OR_RETURN(
        communicator, CreateNcclCommunicator(communicator_options, cuda_device, context.store));
  }
#endif
  if (communicator == nullptr) {
    FSDPD_ASSIGN_OR_RETURN(communicator, CreateCommunicator(communicator_options, context.store));
  }
  engine.communicator = std::make_unique<ProfilingCommunicator>(
      std::move(communicator), engine.recorder.get(), timed_backend);
  const int64_t batch = spec.train().batch_size();
  FSDPD_ASSIGN_OR_RETURN(engine.model,
                         MiniLLM::Create(config, batch, data.seq_len(), engine.backend.get()));
  FsdpOptions fsdp_options;
  fsdp_options.reshard_after_forward = spec.parallel().reshard_after_forward();
  const bool bf16_params = spec.parallel().param_dtype() == "bf16";
  if (engine.backend->activation_dtype() == DType::kBF16) {
    // The CUDA kernels read bf16 parameters: the fp32 master shard is cast to bf16 into its
    // slice of the unsharded buffer and gathered in bf16 (half the bytes on the wire).
    if (!bf16_params) {
      return absl::InvalidArgumentError(
          absl::StrCat("parallel.param_dtype 'fp32' on ", engine.backend->name(),
                       ": the CUDA backend computes with bf16 parameters; use param_dtype: bf16"));
    }
    fsdp_options.param_storage_dtype = DType::kBF16;
    fsdp_options.round_params_to_bf16 = false;
  } else {
    // The CPU backend computes in fp32: bf16 parameters are fp32 storage rounded through bf16.
    fsdp_options.param_storage_dtype = DType::kF32;
    fsdp_options.round_params_to_bf16 = bf16_params;
  }
  fsdp_options.profiler = engine.recorder.get();
  fsdp_options.transient_grad_shards = OptimizerInBackward(spec, context);
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
  FSDPD_ASSIGN_OR_RETURN(engine.data, CreateDataLoader(data_options));
  return engine;
}

// On a GPU the allocator's peak leaves out the CUDA context, cuBLASLt and NCCL; the driver's
// view (every process on the device) is logged beside it.
std::string DriverMemoryNote(const std::string& device) {
#ifdef FSDPD_HAS_CUDA
  absl::StatusOr<int> index = ParseCudaDevice(device);
  if (!index.ok()) return "";
  absl::StatusOr<DriverMemory> driver = QueryDriverMemory(*index);
  if (!driver.ok()) return "";
  return absl::StrFormat(" (driver: %.1f MiB used of %.1f MiB)", driver->used_bytes / 1048576.0,
                         driver->total_bytes / 1048576.0);
#else
  return "";
#endif
}

// A GPU's MFU is measured against its tensor-core peak, not a small measured GEMM;
// FSDPD_PEAK_FLOPS still overrides it (PeakFlopsPerRank reads it).
absl::StatusOr<double> PeakFlopsFor(const std::string& device, Backend& backend) {
#ifdef FSDPD_HAS_CUDA
  absl::StatusOr<int> index = ParseCudaDevice(device);
  if (index.ok() && std::getenv("FSDPD_PEAK_FLOPS") == nullptr) {
    absl::StatusOr<double> peak = CudaPeakBf16Flops(*index);
    if (peak.ok() && *peak > 0.0) return *peak;
  }
#endif
  return PeakFlopsPerRank(backend);
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

  FSDPD_RETURN_IF_ERROR(CheckRunnable(spec, context));
  FSDPD_ASSIGN_OR_RETURN(ModelConfig config, ModelConfigFromSpec(spec.model()));
  FSDPD_ASSIGN_OR_RETURN(config.activation_recompute,
                         ParseActivationRecompute(spec.parallel().activation_recompute()));
  FSDPD_ASSIGN_OR_RETURN(const JobPaths paths, ResolveJobPaths(spec, context));
  FSDPD_ASSIGN_OR_RETURN(Engine engine, BuildEngine(spec, context, config, paths.data));
  Backend& backend = *engine.backend;
  Communicator& communicator = *engine.communicator;
  FsdpState& state = *engine.state;

  // Initial weights first, so a resume overwrites them; a bad init file fails even on resume.
  if (!paths.init_path.empty()) {
    FSDPD_RETURN_IF_ERROR(InitializeWeightsFromFile(paths.init_path, state));
    log("info", absl::StrCat("initial weights from ", paths.init_path));
  } else {
    FSDPD_RETURN_IF_ERROR(InitializeWeightsFromSeed(config, spec.train().seed(), state));
  }
  FSDPD_ASSIGN_OR_RETURN(const int64_t start_step,
                         ResumeFromCheckpoint(paths.job_dir, state, communicator, backend, log));

  FSDPD_ASSIGN_OR_RETURN(const double peak_flops, PeakFlopsFor(context.device, backend));
  const double flops_per_token = FlopsPerToken(spec);
  const int64_t total_steps = spec.train().steps();
  const int64_t tokens_per_rank_step = spec.train().batch_size() * paths.data.seq_len();
  log("info",
      absl::StrFormat("training %s: %d parameters, world %d, steps %d..%d, %d tokens/rank/step, "
                      "peak %.3g FLOP/s per rank for MFU",
                      spec.name(), ParameterCount(spec.model()), context.world_size, start_step + 1,
                      total_steps, tokens_per_rank_step, peak_flops));

  ProfileRecorder* const recorder = engine.recorder.get();
  ProfileWindowOptions profile_options;
  profile_options.job_id = context.job_id;
  profile_options.attempt = context.attempt;
  profile_options.rank = context.rank;
  profile_options.device = backend.name();
  profile_options.peak_flops_per_second = peak_flops;
#ifdef FSDPD_HAS_CUDA
  // On a GPU, kernels are timed and counted on the device; host timers would time launches.
  std::unique_ptr<DeviceProfiler> device_profiler;
  if (hooks.on_profile) {
    device_profiler = DeviceProfilerFor(context.device, context.world_size, peak_flops, log);
  }
  profile_options.device_profiler = device_profiler.get();
#endif
  ProfileWindow profile_window(recorder, profile_options);
  if (hooks.on_profile) {
    profile_window.Schedule(spec.profile().start_step(), spec.profile().steps(),
                            spec.profile().counters());
  }
  auto send_profile = [&](const std::vector<v1::ProfileReport>& reports) {
    if (reports.empty()) return;
    log("info", absl::StrFormat("profiled steps %d..%d: %d kernel table rows, trace in %d chunks",
                                reports.front().start_step(),
                                reports.front().start_step() + reports.front().steps() - 1,
                                reports.front().kernels_size(), reports.size() - 1));
    for (const v1::ProfileReport& report : reports) hooks.on_profile(report);
  };

  const bool optimizer_in_backward = OptimizerInBackward(spec, context);
  log("info", optimizer_in_backward
                  ? "AdamW runs in backward, one unit at a time (no gradient clipping)"
                  : "AdamW runs after backward");
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
    if (hooks.on_profile && hooks.poll_profile_request) {
      if (std::optional<v1::ProfileRequest> request = hooks.poll_profile_request()) {
        absl::Status accepted = profile_window.Request(*request, step);
        log(accepted.ok() ? "info" : "warning",
            accepted.ok() ? absl::StrCat("profiling ", request->steps(), " steps on request")
                          : std::string(accepted.message()));
      }
    }
    profile_window.BeginStep(step);
    const Clock::time_point step_start = Clock::now();
    const double comm_before = communicator.stats().blocked_seconds;
    std::optional<ProfileRange> step_range;
    if (profile_window.recording())
      step_range.emplace(recorder, "", "", absl::StrCat("step ", step));

    std::vector<float> loss = {0.0f};
    {
      ProfileRange range(recorder, "", "", "data loader");
      FSDPD_RETURN_IF_ERROR(engine.data->Batch(step - 1, inputs.data(), targets.data()));
    }
    const AdamWParams adamw = AdamWFor(spec.train(), step);
    double grad_norm = 0.0;
    if (optimizer_in_backward) {
      FSDPD_RETURN_IF_ERROR(engine.optimizer->BeginBackwardStep(adamw));
      FSDPD_ASSIGN_OR_RETURN(const float local_loss,
                             state.ForwardBackward(*engine.model, inputs.data(), targets.data(),
                                                   engine.optimizer.get()));
      ProfileRange range(recorder, "", kPhaseOptimizer, "grad norm");
      FSDPD_ASSIGN_OR_RETURN(grad_norm, engine.optimizer->FinishBackwardStep());
      loss[0] = local_loss;
    } else {
      FSDPD_ASSIGN_OR_RETURN(const float local_loss,
                             state.ForwardBackward(*engine.model, inputs.data(), targets.data()));
      ProfileRange range(recorder, "", kPhaseOptimizer);
      FSDPD_ASSIGN_OR_RETURN(grad_norm, engine.optimizer->Step(adamw, spec.train().grad_clip()));
      loss[0] = local_loss;
    }
    // Every rank's loss is the mean over equally many tokens: their mean is the global mean.
    {
      ProfileRange range(recorder, "", kPhaseComm, "loss all-reduce");
      FSDPD_RETURN_IF_ERROR(AllReduceHostFloats(communicator, backend, &loss, ReduceOp::kAverage));
    }
    FSDPD_RETURN_IF_ERROR(backend.compute_stream().Synchronize());
    step_range.reset();

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
    const MemoryInUse in_use = RankMemoryInUse(context.device);
    report.set_memory_device_used_bytes(in_use.bytes);
    report.set_memory_device_used_source(in_use.source);
    report.set_lr(adamw.lr);
    report.set_grad_norm(grad_norm);
    report.set_unix_millis(UnixMillis());
    if (hooks.on_step) hooks.on_step(report);
    send_profile(profile_window.EndStep(step));
    if (step <= 3 || step % 10 == 0 || step == total_steps) {
      log("info", absl::StrFormat("step %d | loss %.6f | lr %.3g | grad norm %.4g | %.0f tok/s "
                                  "| %.1f ms (comm %.1f ms) | peak %.1f MiB%s",
                                  step, loss[0], adamw.lr, grad_norm, report.tokens_per_second(),
                                  step_seconds * 1e3, exposed_comm * 1e3,
                                  memory.peak_bytes / 1048576.0, DriverMemoryNote(context.device)));
    }
    if (!std::isfinite(loss[0])) {
      return absl::InternalError(absl::StrCat("the loss is not finite at step ", step));
    }
    result.final_step = step;
    result.final_loss = loss[0];

    const int64_t every = spec.checkpoint().every_steps();
    if (every > 0 && step % every == 0) {
      FSDPD_RETURN_IF_ERROR(SaveCheckpoint(paths.job_dir, step,
                                           std::max(spec.checkpoint().keep(), 1), state,
                                           communicator, backend));
      log("info", absl::StrCat("checkpoint of step ", step, " committed"));
    }
  }

  // A window that runs past the last step reports the steps it saw.
  send_profile(profile_window.Finish());

  FSDPD_ASSIGN_OR_RETURN(result.exported_model_path,
                         ExportConsolidatedModel(paths.job_dir + "/model.safetensors",
                                                 result.final_step, state, communicator));
  if (!result.exported_model_path.empty()) {
    log("info", absl::StrCat("exported the model to ", result.exported_model_path));
  }
  return result;
}

}  // namespace fsdpd
