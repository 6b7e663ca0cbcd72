// fsdpctl: submits and watches fsdpd training jobs.
#include <chrono>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "client/commands.h"

int main(int argc, char** argv) {
  fsdpd::client::ClientOptions options;
  CLI::App app{"fsdpctl: submit, watch and manage fsdpd training jobs"};
  app.require_subcommand(1);
  // Lets --coordinator and --json go before or after the verb.
  app.fallthrough();
  app.add_option("--coordinator", options.coordinator, "coordinator address host:port")
      ->envname("FSDPD_COORDINATOR")
      ->capture_default_str();
  app.add_flag("--json", options.json, "machine-readable output");
  std::string tls_ca, token_file;
  app.add_option("--tls-ca", tls_ca, "PEM CA that signed the coordinator's certificate: use TLS")
      ->envname("FSDPD_TLS_CA");
  auto* token_option =
      app.add_option("--token-file", token_file,
                     "file whose first line is the bearer token (default ~/.config/fsdpd/token)")
          ->envname("FSDPD_TOKEN_FILE");

  std::string spec_path, job_id, state_filter, output_path;
  bool watch = false, dry_run = false, follow = false;
  int64_t tail = 0;
  std::vector<std::string> labels;

  CLI::App* submit = app.add_subcommand("submit", "submit a job spec (YAML)");
  submit->add_option("FILE", spec_path, "job spec")->required();
  submit->add_flag("--watch", watch, "follow the job until it ends");
  submit->add_flag("--dry-run", dry_run, "check the spec; store nothing");
  // One key=value per --label or --set, so a positional after it stays positional.
  submit->add_option("--label", labels, "key=value label for grouping runs (repeatable)")
      ->allow_extra_args(false);

  std::vector<std::string> overrides;
  std::string from;
  CLI::App* resubmit = app.add_subcommand(
      "resubmit", "run a job again as a new job, with --set overrides of its spec");
  resubmit->add_option("JOB", job_id, "the job whose spec to run again")->required();
  resubmit
      ->add_option("--set", overrides,
                   "path=value override of the spec, e.g. train.lr=1e-4 (repeatable)")
      ->allow_extra_args(false);
  resubmit->add_option("--from", from,
                       "JOB[@STEP]: start from that job's checkpoint weights (default: newest)");
  resubmit->add_option("--label", labels, "key=value label, added to the job's (repeatable)")
      ->allow_extra_args(false);
  resubmit->add_flag("--watch", watch, "follow the new job until it ends");

  CLI::App* list = app.add_subcommand("list", "list jobs");
  list->add_option("--state", state_filter, "only jobs in this state");
  list->add_option("--label", labels, "only jobs with this key=value label (repeatable: all)")
      ->allow_extra_args(false);

  CLI::App* describe =
      app.add_subcommand("describe", "one page about a job: spec, origin, history, attempts");
  describe->add_option("JOB", job_id, "job id")->required();

  CLI::App* status = app.add_subcommand("status", "show one job");
  status->add_option("JOB", job_id, "job id")->required();

  CLI::App* watch_verb = app.add_subcommand("watch", "follow a job's progress until it ends");
  watch_verb->add_option("JOB", job_id, "job id")->required();
  int reconnect_seconds = 120;
  watch_verb
      ->add_option("--reconnect-for", reconnect_seconds,
                   "seconds to keep reconnecting to a coordinator that went away (0: exit)")
      ->check(CLI::Range(0, 86400))
      ->capture_default_str();

  CLI::App* cancel = app.add_subcommand("cancel", "cancel a job");
  cancel->add_option("JOB", job_id, "job id")->required();
  std::string cancel_reason;
  cancel->add_option("--reason", cancel_reason, "why, recorded in the job's history");

  CLI::App* logs = app.add_subcommand("logs", "print a job's log lines");
  logs->add_option("JOB", job_id, "job id")->required();
  logs->add_flag("-f,--follow", follow, "keep printing new lines until the job ends");
  logs->add_option("--tail", tail, "only the last N lines (0: all)");
  logs->add_option(
          "--reconnect-for", reconnect_seconds,
          "with -f: seconds to keep reconnecting to a coordinator that went away (0: exit)")
      ->check(CLI::Range(0, 86400))
      ->capture_default_str();

  CLI::App* workers = app.add_subcommand("workers", "list the workers");

  CLI::App* export_verb = app.add_subcommand(
      "export", "download a job's weights (safetensors): its final model or a checkpoint");
  export_verb->add_option("JOB", job_id, "job id")->required();
  export_verb
      ->add_option("-o,--output", output_path,
                   "output file (- for stdout); for a llama job a folder, which gets config.json "
                   "and model.safetensors that transformers loads as they are")
      ->required();
  int64_t export_step = 0;
  export_verb
      ->add_option("--step", export_step,
                   "a complete checkpoint's step (default: the final model of a SUCCEEDED job, "
                   "else the newest checkpoint)")
      ->check(CLI::PositiveNumber);

  CLI::App* checkpoints = app.add_subcommand("checkpoints", "list a job's complete checkpoints");
  checkpoints->add_option("JOB", job_id, "job id")->required();

  int rank = 0;
  int64_t start_step = 0, profile_steps = 0;
  CLI::App* profile = app.add_subcommand(
      "profile", "show a job's kernel table, or ask for a profiling window with --steps");
  profile->add_option("JOB", job_id, "job id")->required();
  profile->add_option("--rank", rank, "whose window to show (default 0)");
  profile->add_option("--start", start_step, "first step to profile (default: the next)");
  profile->add_option("--steps", profile_steps, "profile this many steps of a running job");
  bool profile_counters = false;
  profile->add_flag("--counters", profile_counters,
                    "with --steps: also read hardware counters (SM/HBM %; kernel replay costs "
                    "time and device memory)");
  std::string roofline_path;
  profile->add_option("--roofline", roofline_path,
                      "also draw the window's kernels on the device roofline into this SVG file");

  CLI::App* trace = app.add_subcommand("trace", "download a job's Chrome trace (Perfetto)");
  trace->add_option("JOB", job_id, "job id")->required();
  trace->add_option("-o,--output", output_path, "output file")->required();
  trace->add_option("--rank", rank, "whose trace (default 0)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    // Without a verb CLI11 says only "A subcommand is required", also for a word that is no
    // verb: name that word, and the verbs there are.
    if (app.get_subcommands().empty() && dynamic_cast<const CLI::RequiredError*>(&error)) {
      std::string verbs;
      for (const CLI::App* verb : app.get_subcommands({})) {
        verbs += (verbs.empty() ? "" : ", ") + verb->get_name();
      }
      const std::vector<std::string> extras = app.remaining();
      if (!extras.empty() && !extras.front().empty() && extras.front()[0] != '-') {
        return app.exit(
            CLI::ExtrasError("unknown command '" + extras.front() + "'; the commands are " + verbs,
                             CLI::ExitCodes::ExtrasError));
      }
      return app.exit(
          CLI::RequiredError("a command is required: " + verbs, CLI::ExitCodes::RequiredError));
    }
    return app.exit(error);
  }

  using namespace fsdpd::client;
  const bool token_explicit = token_option->count() > 0;
  if (std::string error = LoadCredentials(tls_ca, token_explicit ? token_file : DefaultTokenPath(),
                                          token_explicit, &options);
      !error.empty()) {
    return Fail(error);
  }
  if (submit->parsed()) return RunSubmit(options, spec_path, watch, dry_run, labels);
  if (resubmit->parsed()) {
    return RunResubmit(options, job_id, overrides, from, labels, watch);
  }
  if (list->parsed()) return RunList(options, state_filter, labels);
  if (describe->parsed()) return RunDescribe(options, job_id);
  if (status->parsed()) return RunStatus(options, job_id);
  if (watch_verb->parsed()) {
    return RunWatch(options, job_id, std::chrono::seconds(reconnect_seconds));
  }
  if (cancel->parsed()) return RunCancel(options, job_id, cancel_reason);
  if (logs->parsed()) {
    return RunLogs(options, job_id, follow, tail, std::chrono::seconds(reconnect_seconds));
  }
  if (workers->parsed()) return RunWorkers(options);
  if (export_verb->parsed()) return RunExport(options, job_id, output_path, export_step);
  if (checkpoints->parsed()) return RunCheckpoints(options, job_id);
  if (profile->parsed()) {
    return RunProfile(options, job_id, rank, start_step, profile_steps, profile_counters,
                      roofline_path);
  }
  if (trace->parsed()) return RunTrace(options, job_id, rank, output_path);
  return 1;
}
