// fsdpd-train: runs one rank of a job standalone, without the coordinator. The ranks of a job
// meet through a shared directory (--store-dir); used by the engine's multi-process tests and
// by benchmarks. Prints one JSON object per step on stdout, then one with the result; logs go
// to stderr. Exit status: 0 success, 1 training failed, 2 bad flags or spec, 3 cancelled.
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "nlohmann/json.hpp"
#include "proto/spec/job_spec.h"
#include "spdlog/sinks/stdout_sinks.h"
#include "spdlog/spdlog.h"
#include "worker/comm/file_key_value_store.h"
#include "worker/trainer.h"

namespace {

std::atomic<bool> cancel_requested{false};

void RequestCancel(int) { cancel_requested = true; }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fsdpd-train: run one rank of a training job from a spec file"};
  std::string spec_path, store_dir, checkpoint_dir, job_id = "standalone";
  std::string bind_address = "127.0.0.1";
  std::string device = "cpu";
  std::vector<std::string> allowed_roots;
  int rank = 0, world_size = 1, attempt = 0;
  int64_t steps = 0, crash_at_step = 0;
  app.add_option("--spec", spec_path, "job spec (YAML)")->required();
  app.add_option("--rank", rank, "this process's rank")->check(CLI::NonNegativeNumber);
  app.add_option("--world-size", world_size, "ranks in the job (overrides parallel.world_size)")
      ->check(CLI::PositiveNumber);
  app.add_option("--store-dir", store_dir,
                 "directory shared by the ranks for rendezvous (needed when world size > 1)");
  app.add_option("--checkpoint-dir", checkpoint_dir, "the job's checkpoint directory")->required();
  app.add_option("--job-id", job_id, "job id in reports");
  app.add_option("--attempt", attempt, "attempt number: separates rendezvous keys of restarts");
  app.add_option("--bind-address", bind_address, "address Gloo binds and peers connect to");
  app.add_option("--device", device, "cpu or cuda:N (must match the spec's parallel.device)")
      ->capture_default_str();
  app.add_option("--allowed-root", allowed_roots, "confine data/init/checkpoint paths (repeat)");
  app.add_option("--steps", steps, "override train.steps")->check(CLI::PositiveNumber);
  app.add_option("--crash-at-step", crash_at_step,
                 "testing: exit at once, without cleanup, when this step is reported");
  CLI11_PARSE(app, argc, argv);

  spdlog::set_default_logger(spdlog::stderr_logger_mt("fsdpd-train"));
  absl::StatusOr<fsdpd::v1::JobSpec> spec = fsdpd::LoadJobSpecFile(spec_path);
  if (!spec.ok()) {
    std::cerr << "fsdpd-train: " << spec.status().message() << "\n";
    return 2;
  }
  spec->mutable_parallel()->set_world_size(world_size);
  if (steps > 0) spec->mutable_train()->set_steps(steps);
  // The spec enters here, so it is validated here, once, with the flags' overrides: the trainer
  // trusts it, as a worker trusts the coordinator's stored spec.
  if (std::vector<fsdpd::FieldError> errors = fsdpd::ValidateJobSpec(*spec); !errors.empty()) {
    std::cerr << "fsdpd-train: invalid spec " << spec_path << ": "
              << fsdpd::FormatFieldErrors(errors) << "\n";
    return 2;
  }

  std::unique_ptr<fsdpd::FileKeyValueStore> store;
  if (world_size > 1) {
    if (store_dir.empty()) {
      std::cerr << "fsdpd-train: --store-dir is needed when --world-size > 1\n";
      return 2;
    }
    auto opened = fsdpd::FileKeyValueStore::Open(store_dir + "/attempt-" + std::to_string(attempt));
    if (!opened.ok()) {
      std::cerr << "fsdpd-train: " << opened.status().message() << "\n";
      return 2;
    }
    store = std::move(*opened);
  }

  fsdpd::RankContext context;
  context.job_id = job_id;
  context.attempt = attempt;
  context.rank = rank;
  context.world_size = world_size;
  context.checkpoint_dir = checkpoint_dir;
  context.allowed_roots = allowed_roots;
  context.store = store.get();
  context.bind_address = bind_address;
  context.device = device;

  std::signal(SIGINT, RequestCancel);
  std::signal(SIGTERM, RequestCancel);
  fsdpd::TrainerHooks hooks;
  hooks.cancelled = &cancel_requested;
  hooks.on_step = [&](const fsdpd::v1::StepReport& report) {
    nlohmann::json line = {{"step", report.step()},
                           {"loss", report.loss()},
                           {"grad_norm", report.grad_norm()},
                           {"lr", report.lr()},
                           {"tokens_per_second", report.tokens_per_second()},
                           {"step_seconds", report.step_seconds()},
                           {"exposed_comm_seconds", report.exposed_comm_seconds()},
                           {"mfu_ratio", report.mfu_ratio()},
                           {"memory_peak_bytes", report.memory_peak_bytes()},
                           {"memory_reserved_bytes", report.memory_reserved_bytes()}};
    std::cout << line.dump() << std::endl;
    if (crash_at_step > 0 && report.step() == crash_at_step) std::_Exit(137);
  };

  absl::StatusOr<fsdpd::TrainResult> result = fsdpd::RunTrainer(*spec, context, hooks);
  if (!result.ok()) {
    std::cerr << "fsdpd-train: rank " << rank << ": " << result.status().ToString() << "\n";
    if (absl::IsCancelled(result.status())) return 3;
    return absl::IsInvalidArgument(result.status()) ? 2 : 1;
  }
  nlohmann::json summary = {{"final_step", result->final_step},
                            {"final_loss", result->final_loss},
                            {"exported_model_path", result->exported_model_path}};
  std::cout << summary.dump() << std::endl;
  return 0;
}
