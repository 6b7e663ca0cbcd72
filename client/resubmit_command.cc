// fsdpctl resubmit JOB [--set path=value ...] [--from JOB[@STEP]] [--label k=v ...] [--watch]:
// a new job (its own id and uid) with JOB's stored spec and the overrides, whose origin (the job
// it was resubmitted from, the overrides, the checkpoint its weights come from) the coordinator
// records. The spec goes through the coordinator's validator like any submitted one.
#include <iostream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/commands.h"
#include "client/job_text.h"
#include "client/output.h"
#include "client/spec_overrides.h"
#include "fsdpd/v1/jobs.grpc.pb.h"

namespace fsdpd::client {
namespace {

// "job-000001" or "job-000001@200" as a CheckpointRef (step 0: the newest).
absl::StatusOr<v1::CheckpointRef> ParseFrom(const std::string& from) {
  v1::CheckpointRef ref;
  const size_t at = from.find('@');
  ref.set_job_id(from.substr(0, at));
  if (ref.job_id().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--from ", from, ": write JOB or JOB@STEP, e.g. --from job-000001@200"));
  }
  if (at != std::string::npos) {
    int64_t step = 0;
    if (!absl::SimpleAtoi(from.substr(at + 1), &step) || step < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--from ", from, ": the step after '@' must be a positive checkpoint step, got \"",
          from.substr(at + 1), "\" (leave it out for the newest checkpoint)"));
    }
    ref.set_step(step);
  }
  return ref;
}

}  // namespace

int RunResubmit(const ClientOptions& options, const std::string& job_id,
                const std::vector<std::string>& overrides, const std::string& from,
                const std::vector<std::string>& labels, bool watch) {
  absl::StatusOr<std::map<std::string, std::string>> added = ParseKeyValues(labels, "--label");
  if (!added.ok()) return Fail(std::string(added.status().message()));
  std::optional<v1::CheckpointRef> weights_from;
  if (!from.empty()) {
    absl::StatusOr<v1::CheckpointRef> parsed = ParseFrom(from);
    if (!parsed.ok()) return Fail(std::string(parsed.status().message()));
    weights_from = *parsed;
  }

  auto stub = v1::JobService::NewStub(Connect(options));
  v1::Job original;
  if (grpc::Status status = FetchJob(*stub, job_id, &original); !status.ok()) {
    return Fail(DescribeError(status, options, job_id));
  }

  v1::SubmitJobRequest request;
  v1::JobSpec* spec = request.mutable_spec();
  *spec = original.spec();
  // The coordinator sets these from origin.weights_from; a submitted spec may not.
  spec->mutable_checkpoint()->clear_init_from_job_uid();
  spec->mutable_checkpoint()->clear_init_from_step();
  for (const std::string& assignment : overrides) {
    if (absl::Status applied = ApplySpecOverride(assignment, spec); !applied.ok()) {
      return Fail(std::string(applied.message()));
    }
  }
  request.mutable_labels()->insert(original.labels().begin(), original.labels().end());
  for (const auto& [key, value] : *added) (*request.mutable_labels())[key] = value;
  v1::JobOrigin* origin = request.mutable_origin();
  origin->set_resubmitted_from(original.id());
  for (const std::string& assignment : overrides) origin->add_overrides(assignment);
  if (weights_from.has_value()) {
    *origin->mutable_weights_from() = *weights_from;
  } else if (original.origin().has_weights_from() && spec->checkpoint().init_from().empty()) {
    // Run again means from the same weights.
    *origin->mutable_weights_from() = original.origin().weights_from();
  }

  v1::SubmitJobResponse response;
  grpc::ClientContext context;
  SetUnaryDeadline(&context);
  grpc::Status status = stub->SubmitJob(&context, request, &response);
  if (status.error_code() == grpc::StatusCode::INVALID_ARGUMENT) {
    return Fail("cannot resubmit " + job_id + ":" + DescribeInvalidArgument(status));
  }
  if (!status.ok()) return Fail(DescribeError(status, options));
  if (options.json) {
    std::cout << nlohmann::json{{"id", response.id()}}.dump() << std::endl;
  } else {
    std::cout << "submitted job " << response.id() << " (" << spec->name() << "), "
              << OriginText(response.job().origin()) << std::endl;
  }
  if (watch) return RunWatch(options, response.id());
  return 0;
}

}  // namespace fsdpd::client
