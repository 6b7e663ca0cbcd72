// fsdpctl describe JOB: one page of 80 columns about a job for a person: what it is and where it
// stands, the spec fields that differ from the defaults, labels, origin, every state change with
// its actor and reason, every attempt with its workers and hosts, the job's checkpoints, and its
// exported model.
#include <iostream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/commands.h"
#include "client/job_text.h"
#include "client/output.h"
#include "fsdpd/v1/jobs.grpc.pb.h"
#include "google/protobuf/text_format.h"
#include "proto/spec/job_spec.h"

namespace fsdpd::client {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

std::string ValueText(const Message& message, const FieldDescriptor* field) {
  if (field->cpp_type() == FieldDescriptor::CPPTYPE_STRING && !field->is_repeated()) {
    return message.GetReflection()->GetString(message, field);
  }
  std::string text;
  google::protobuf::TextFormat::PrintFieldValueToString(message, field, -1, &text);
  return text;
}

// "key=value" for each field of `message` that differs from `defaults`.
std::vector<std::string> Differences(const Message& message, const Message& defaults) {
  std::vector<std::string> found;
  const google::protobuf::Descriptor* descriptor = message.GetDescriptor();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const FieldDescriptor* field = descriptor->field(i);
    if (field->is_repeated()) {
      if (message.GetReflection()->FieldSize(message, field) == 0) continue;
      std::string text;
      google::protobuf::TextFormat::PrintFieldValueToString(message, field, 0, &text);
      found.push_back(absl::StrCat(field->name(), "=[", text, ", ...]"));
      continue;
    }
    const std::string value = ValueText(message, field);
    if (value == ValueText(defaults, field)) continue;
    found.push_back(absl::StrCat(field->name(), "=", value));
  }
  return found;
}

// The spec's fields that differ from the coordinator's defaults, a line per section.
std::string SpecText(const v1::JobSpec& spec) {
  v1::JobSpec defaults;
  ApplyJobSpecDefaults(&defaults);
  std::string out;
  const google::protobuf::Descriptor* descriptor = spec.GetDescriptor();
  std::vector<std::string> top;
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const FieldDescriptor* field = descriptor->field(i);
    const google::protobuf::Reflection* reflection = spec.GetReflection();
    if (field->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE || field->is_repeated()) {
      if (field->is_repeated() && reflection->FieldSize(spec, field) == 0) continue;
      if (!field->is_repeated() && ValueText(spec, field) == ValueText(defaults, field)) continue;
      top.push_back(absl::StrCat(field->name(), "=", ValueText(spec, field)));
      continue;
    }
    const std::vector<std::string> changed =
        Differences(reflection->GetMessage(spec, field), reflection->GetMessage(defaults, field));
    if (changed.empty()) continue;
    absl::StrAppend(&out, "  ",
                    Wrap(absl::StrCat(field->name(), ": ", absl::StrJoin(changed, " ")), 78, 4));
  }
  if (!top.empty()) out = absl::StrCat("  ", Wrap(absl::StrJoin(top, " "), 78, 4), out);
  return out.empty() ? "  (every field at its default)\n" : out;
}

// The checkpoints section: the ListCheckpoints answer, or why there is none.
std::string CheckpointsText(v1::JobService::Stub& stub, const std::string& job_id) {
  v1::ListCheckpointsRequest request;
  request.set_id(job_id);
  v1::ListCheckpointsResponse response;
  grpc::ClientContext context;
  SetUnaryDeadline(&context);
  const grpc::Status status = stub.ListCheckpoints(&context, request, &response);
  if (status.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
    return "checkpoints: not available from this coordinator\n";
  }
  if (!status.ok()) return absl::StrCat("checkpoints: ", status.error_message(), "\n");
  if (response.checkpoints_size() == 0) return "checkpoints: none\n";
  std::vector<std::vector<std::string>> rows;
  for (const v1::Checkpoint& checkpoint : response.checkpoints()) {
    rows.push_back(
        {std::to_string(checkpoint.step()), FormatTime(checkpoint.commit_time().seconds() * 1000),
         FormatBytes(checkpoint.size_bytes()), std::to_string(checkpoint.attempt()),
         std::to_string(checkpoint.world_size()), absl::StrJoin(checkpoint.hosts(), ",")});
  }
  std::string table = FormatTable({"STEP", "COMMITTED", "SIZE", "ATTEMPT", "RANKS", "HOSTS"}, rows);
  std::istringstream lines(table);
  std::string out = "checkpoints\n";
  for (std::string line; std::getline(lines, line);) absl::StrAppend(&out, "  ", line, "\n");
  return out;
}

}  // namespace

int RunDescribe(const ClientOptions& options, const std::string& job_id) {
  auto stub = v1::JobService::NewStub(Connect(options));
  v1::Job job;
  grpc::Status status = FetchJob(*stub, job_id, &job);
  if (!status.ok()) return Fail(DescribeError(status, options, job_id));

  std::string page;
  const v1::JobSpec& spec = job.spec();
  absl::StrAppend(&page,
                  Wrap(absl::StrCat(job.id(), "  ", spec.name(), "  ", StateName(job.state()),
                                    job.reason().empty() ? "" : ": " + job.reason())));
  absl::StrAppend(&page, "  owner ", ActorName(job.owner()), ", uid ", job.uid(), "\n");
  absl::StrAppend(&page, "  step ", job.step(), "/", spec.train().steps(), ", attempt ",
                  job.attempt(), " (max restarts ", spec.max_restarts(), "), created ",
                  FormatTime(job.created_unix_millis()), "\n");
  absl::StrAppend(&page, "spec (what differs from the defaults)\n", SpecText(spec));
  absl::StrAppend(&page,
                  Wrap(absl::StrCat("labels: ", job.labels_size() > 0 ? LabelsText(job) : "none")));
  const std::string origin = OriginText(job.origin());
  absl::StrAppend(
      &page, Wrap(absl::StrCat("origin: ", origin.empty() ? "submitted from a spec" : origin)));
  absl::StrAppend(&page, "history\n");
  for (const v1::StateChange& change : job.transitions()) {
    absl::StrAppend(&page, "  ",
                    Wrap(absl::StrCat(FormatTime(change.unix_millis()), " ",
                                      StateName(change.state()), " by ", ActorName(change.actor()),
                                      change.reason().empty() ? "" : ": " + change.reason()),
                         78, 4));
  }
  if (job.attempts_size() == 0) {
    absl::StrAppend(&page, "attempts: none yet\n");
  } else {
    absl::StrAppend(&page, "attempts\n");
    for (const v1::Attempt& attempt : job.attempts()) {
      absl::StrAppend(&page, "  ", Wrap(AttemptText(attempt), 78, 4));
    }
  }
  absl::StrAppend(&page, CheckpointsText(*stub, job.id()));
  absl::StrAppend(&page, Wrap(job.state() == v1::SUCCEEDED
                                  ? absl::StrCat("model: fsdpctl export ", job.id(), " -o FILE")
                                  : "model: none (a job's model is exported once it succeeds)"));
  std::cout << page << std::flush;
  return 0;
}

}  // namespace fsdpd::client
