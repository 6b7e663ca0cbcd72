#include <iostream>

#include "client/commands.h"
#include "client/job_text.h"
#include "client/output.h"
#include "client/spec_overrides.h"
#include "fsdpd/v1/jobs.grpc.pb.h"

namespace fsdpd::client {

int RunList(const ClientOptions& options, const std::string& state_filter,
            const std::vector<std::string>& labels) {
  v1::ListJobsRequest request;
  absl::StatusOr<std::map<std::string, std::string>> selector = ParseKeyValues(labels, "--label");
  if (!selector.ok()) return Fail(std::string(selector.status().message()));
  request.mutable_labels()->insert(selector->begin(), selector->end());
  if (!state_filter.empty()) {
    std::optional<v1::JobState> state = ParseJobState(state_filter);
    if (!state) {
      return Fail("--state: unknown job state \"" + state_filter +
                  "\" (PENDING, SCHEDULED, RUNNING, RETRYING, SUCCEEDED, FAILED or CANCELLED)");
    }
    request.add_states(*state);
  }
  auto stub = v1::JobService::NewStub(Connect(options));
  v1::ListJobsResponse response;
  grpc::ClientContext context;
  SetUnaryDeadline(&context);
  grpc::Status status = stub->ListJobs(&context, request, &response);
  if (!status.ok()) return Fail(DescribeError(status, options));

  if (options.json) {
    nlohmann::json jobs = nlohmann::json::array();
    for (const v1::Job& job : response.jobs()) jobs.push_back(JobToJson(job));
    std::cout << nlohmann::json{{"jobs", jobs}}.dump() << std::endl;
    return 0;
  }
  if (response.jobs_size() == 0) {
    std::cout << (labels.empty() ? "no jobs" : "no jobs with those labels") << std::endl;
    return 0;
  }
  std::vector<std::vector<std::string>> rows;
  for (const v1::Job& job : response.jobs()) {
    rows.push_back({job.id(), job.spec().name(), StateName(job.state()),
                    std::to_string(job.step()) + "/" + std::to_string(job.spec().train().steps()),
                    job.step() > 0 ? FormatLoss(job.loss()) : "-",
                    job.tokens_per_second() > 0 ? FormatRate(job.tokens_per_second()) : "-",
                    FormatAge(job.created_unix_millis())});
  }
  std::cout << FormatTable({"ID", "NAME", "STATE", "STEP", "LOSS", "TOKENS/S", "CREATED"}, rows);
  return 0;
}

int RunStatus(const ClientOptions& options, const std::string& job_id) {
  auto stub = v1::JobService::NewStub(Connect(options));
  v1::Job job;
  grpc::Status status = FetchJob(*stub, job_id, &job);
  if (!status.ok()) return Fail(DescribeError(status, options, job_id));

  if (options.json) {
    std::cout << JobToJson(job).dump() << std::endl;
    return 0;
  }
  const v1::JobSpec& spec = job.spec();
  std::cout << "job        " << job.id() << " (" << spec.name() << ")\n"
            << "owner      " << ActorName(job.owner()) << "\n"
            << "state      " << StateName(job.state())
            << (job.reason().empty() ? "" : ": " + job.reason()) << "\n"
            << "attempt    " << job.attempt() << " (max restarts " << spec.max_restarts() << ")\n"
            << "step       " << job.step() << "/" << spec.train().steps() << "\n"
            << "loss       " << (job.step() > 0 ? FormatLoss(job.loss()) : "-") << "\n"
            << "tokens/s   "
            << (job.tokens_per_second() > 0 ? FormatRate(job.tokens_per_second()) : "-") << "\n"
            << "model      vocab " << spec.model().vocab() << ", dim " << spec.model().dim()
            << ", layers " << spec.model().layers() << ", heads " << spec.model().heads() << "\n"
            << "parallel   " << spec.parallel().world_size() << " x " << spec.parallel().device()
            << " (" << spec.parallel().param_dtype()
            << (spec.parallel().matmul_dtype() == "fp8" ? ", fp8 matmuls" : "") << ")\n"
            << "created    " << FormatTime(job.created_unix_millis()) << "\n"
            << "started    " << FormatTime(job.started_unix_millis()) << "\n"
            << "finished   " << FormatTime(job.finished_unix_millis()) << "\n";
  if (job.labels_size() > 0) std::cout << "labels     " << LabelsText(job) << "\n";
  if (const std::string origin = OriginText(job.origin()); !origin.empty()) {
    std::cout << "origin     " << origin << "\n";
  }
  if (job.worker_ids_size() > 0) {
    std::cout << "workers   ";
    for (int rank = 0; rank < job.worker_ids_size(); ++rank) {
      std::cout << " " << rank << ":" << job.worker_ids(rank);
    }
    std::cout << "\n";
  }
  if (job.transitions_size() > 0) {
    std::cout << "history\n";
    for (const v1::StateChange& change : job.transitions()) {
      std::cout << "  " << FormatTime(change.unix_millis()) << "  " << StateName(change.state())
                << " by " << ActorName(change.actor())
                << (change.reason().empty() ? "" : ": " + change.reason()) << "\n";
    }
  }
  std::cout << std::flush;
  return 0;
}

int RunCancel(const ClientOptions& options, const std::string& job_id, const std::string& reason) {
  auto stub = v1::JobService::NewStub(Connect(options));
  v1::CancelJobRequest request;
  request.set_id(job_id);
  request.set_reason(reason.empty() ? "cancelled with fsdpctl" : reason);
  v1::Job job;
  grpc::ClientContext context;
  SetUnaryDeadline(&context);
  grpc::Status status = stub->CancelJob(&context, request, &job);
  if (!status.ok()) return Fail(DescribeError(status, options, job_id));
  if (options.json) {
    std::cout << JobToJson(job).dump() << std::endl;
  } else {
    std::cout << "job " << job.id() << ": " << StateName(job.state())
              << (job.reason().empty() ? "" : " (" + job.reason() + ")") << std::endl;
  }
  return 0;
}

}  // namespace fsdpd::client
