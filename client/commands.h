// The fsdpctl verbs. Each returns the process exit status and prints its own errors.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "client/client_context.h"

namespace fsdpd::client {

// submit_command.cc: `labels` are key=value arguments of --label.
int RunSubmit(const ClientOptions& options, const std::string& spec_path, bool watch, bool dry_run,
              const std::vector<std::string>& labels = {});

// resubmit_command.cc: a new job with JOB's spec and `overrides` (--set path=value,
// client/spec_overrides.h), JOB's labels plus `labels`, and its origin recorded; with `from`
// ("JOB[@STEP]") it starts from that job's checkpoint weights, otherwise from the weights JOB
// started from, if any.
int RunResubmit(const ClientOptions& options, const std::string& job_id,
                const std::vector<std::string>& overrides, const std::string& from,
                const std::vector<std::string>& labels, bool watch);

// describe_command.cc: one page of 80 columns about a job for a person.
int RunDescribe(const ClientOptions& options, const std::string& job_id);

// job_commands.cc
int RunList(const ClientOptions& options, const std::string& state_filter,
            const std::vector<std::string>& labels = {});
int RunStatus(const ClientOptions& options, const std::string& job_id);
// `reason` ("" : "cancelled with fsdpctl") is recorded on the CANCELLED transition.
int RunCancel(const ClientOptions& options, const std::string& job_id,
              const std::string& reason = "");

// watch_command.cc: exits 0 only if the job SUCCEEDED. When the coordinator becomes
// unavailable it reconnects for up to reconnect_for (0: fails at once), and prints each event of
// the job's history once.
int RunWatch(const ClientOptions& options, const std::string& job_id,
             std::chrono::seconds reconnect_for = std::chrono::seconds(120));
// logs_command.cc: with `follow`, rides out a coordinator that goes away as RunWatch does, and
// prints each line once, resuming after the last line printed.
int RunLogs(const ClientOptions& options, const std::string& job_id, bool follow, int64_t tail,
            std::chrono::seconds reconnect_for = std::chrono::seconds(120));

// worker_commands.cc
int RunWorkers(const ClientOptions& options);

// export_command.cc: step 0 exports a SUCCEEDED job's final model, else the job's newest
// complete checkpoint; step N that checkpoint, whatever the job's state. A llama job's
// output_path is a folder: model.safetensors and config.json, for transformers.
int RunExport(const ClientOptions& options, const std::string& job_id,
              const std::string& output_path, int64_t step = 0);

// checkpoint_commands.cc
int RunCheckpoints(const ClientOptions& options, const std::string& job_id);

// profile_commands.cc: with steps > 0 asks for a profiling window (with hardware counters when
// `counters`, whose kernel replay costs time and device memory: docs/profiling.md), otherwise
// prints the latest window's kernel table, and with a roofline_path also writes its roofline
// chart (SVG).
int RunProfile(const ClientOptions& options, const std::string& job_id, int rank,
               int64_t start_step, int64_t steps, bool counters = false,
               const std::string& roofline_path = "");
int RunTrace(const ClientOptions& options, const std::string& job_id, int rank,
             const std::string& output_path);

}  // namespace fsdpd::client
