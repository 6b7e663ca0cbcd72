#include <filesystem>
#include <iostream>
#include <system_error>

#include "client/commands.h"
#include "client/output.h"
#include "client/spec_overrides.h"
#include "fsdpd/v1/jobs.grpc.pb.h"
#include "proto/spec/job_spec.h"
#include "proto/spec/spec_path_fields.h"
#include "proto/spec/spec_validate.h"

namespace fsdpd::client {
namespace {

// Workers resolve paths on their own hosts, so a path relative to the spec file is made
// absolute here, against the spec file's folder: every path field of the spec
// (proto/spec/spec_path_fields.h).
void ResolveRelativePaths(const std::string& spec_path, v1::JobSpec* spec) {
  std::error_code error;
  const std::filesystem::path folder =
      std::filesystem::absolute(spec_path, error).parent_path().lexically_normal();
  if (error) return;
  // Only the paths the spec sets: an unset field stays unset, for the coordinator's default.
  for (const SpecPathField& field : SpecPathFields()) {
    if (!field.IsSet(*spec)) continue;
    const std::string path = field.Get(*spec);
    if (path.empty() || std::filesystem::path(path).is_absolute()) continue;
    field.Set(spec, (folder / path).lexically_normal().string());
  }
}

}  // namespace

int RunSubmit(const ClientOptions& options, const std::string& spec_path, bool watch, bool dry_run,
              const std::vector<std::string>& labels) {
  absl::StatusOr<std::map<std::string, std::string>> label_pairs =
      ParseKeyValues(labels, "--label");
  if (!label_pairs.ok()) return Fail(std::string(label_pairs.status().message()));
  // Only what the YAML says is sent: the coordinator fills in the defaults.
  absl::StatusOr<v1::JobSpec> spec = LoadJobSpecFile(spec_path, SpecDefaults::kLeaveUnset);
  if (!spec.ok()) {
    return Fail("invalid spec " + spec_path + ": " + std::string(spec.status().message()));
  }
  ResolveRelativePaths(spec_path, &*spec);
  // An oversized field is named here; sent, it would fail as an oversized gRPC message.
  FieldErrors too_long;
  ValidateStringLengths(*spec, too_long);
  if (!too_long.empty()) {
    return Fail("invalid spec " + spec_path + ": " + FormatFieldErrors(too_long.Take()));
  }
  // A string that is not UTF-8 cannot be sent (proto3): named here, not lost in transport.
  FieldErrors not_utf8;
  ValidateUtf8Strings(*spec, not_utf8);
  if (!not_utf8.empty()) {
    return Fail("invalid spec " + spec_path + ": " + FormatFieldErrors(not_utf8.Take()));
  }

  auto stub = v1::JobService::NewStub(Connect(options));
  v1::SubmitJobRequest request;
  *request.mutable_spec() = *spec;
  request.set_dry_run(dry_run);
  request.mutable_labels()->insert(label_pairs->begin(), label_pairs->end());
  v1::SubmitJobResponse response;
  grpc::ClientContext context;
  SetUnaryDeadline(&context);
  grpc::Status status = stub->SubmitJob(&context, request, &response);
  if (!status.ok()) {
    if (status.error_code() == grpc::StatusCode::INVALID_ARGUMENT) {
      return Fail("invalid spec " + spec_path + ":" + DescribeInvalidArgument(status));
    }
    return Fail(DescribeError(status, options));
  }

  if (dry_run) {
    nlohmann::json violations = nlohmann::json::array();
    for (const v1::FieldViolation& violation : response.violations()) {
      violations.push_back(
          {{"field", violation.field()}, {"description", violation.description()}});
    }
    const bool valid = response.violations_size() == 0;
    if (options.json) {
      std::cout << nlohmann::json{{"valid", valid}, {"violations", violations}}.dump() << std::endl;
    } else if (valid) {
      std::cout << "spec " << spec_path << " is valid (nothing was submitted)" << std::endl;
    } else {
      std::cerr << "fsdpctl: invalid spec " << spec_path << ":" << std::endl;
      for (const v1::FieldViolation& violation : response.violations()) {
        std::cerr << "  " << violation.field() << ": " << violation.description() << std::endl;
      }
    }
    return valid ? 0 : 1;
  }

  if (options.json) {
    std::cout << nlohmann::json{{"id", response.id()}}.dump() << std::endl;
  } else {
    std::cout << "submitted job " << response.id() << " (" << spec->name() << ")" << std::endl;
  }
  if (watch) return RunWatch(options, response.id());
  return 0;
}

}  // namespace fsdpd::client
