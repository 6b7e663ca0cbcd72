// What the job service's answers share beyond one RPC: INVALID_ARGUMENT with google.rpc.BadRequest
// field violations in the status details, Timestamps beside the millisecond times, and
// ListJobs' newest-first pages.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "fsdpd/v1/jobs.pb.h"
#include "grpcpp/grpcpp.h"
#include "proto/spec/job_spec.h"

namespace fsdpd::server {

// INVALID_ARGUMENT whose message is FormatFieldErrors(errors) and whose details hold a
// google.rpc.Status with one google.rpc.BadRequest, one field violation per error.
grpc::Status InvalidArgument(const std::vector<FieldError>& errors);
grpc::Status InvalidArgument(std::string field, std::string description);

// Sets create_time, start_time and finish_time, and each transition's time, from the
// *_unix_millis fields (unset where 0).
void SetJobTimestamps(v1::Job* job);

// NOT_FOUND for a job without a profiling window (what = "profile" or "complete trace") from
// `rank`, with what can still record one given the job's state: a running job takes
// `fsdpctl profile JOB --steps K`, a finished one only a new submission with profile.steps.
grpc::Status NoProfileWindow(const v1::Job& job, int rank, const std::string& what);

struct JobPage {
  std::vector<v1::Job> jobs;
  std::string next_page_token;  // empty: the last page
};

// Orders jobs newest first (created_unix_millis, then id, both descending) and cuts the page
// that follows page_token (empty: the first page). page_size 0 means every job; larger than
// kMaxPageSize is served as kMaxPageSize (AIP-158), the rest following next_page_token. A token
// that is not one this function made is InvalidArgumentError with the reason alone (the caller
// names the field page_token).
constexpr int kMaxPageSize = 1000;
absl::StatusOr<JobPage> PageJobsNewestFirst(std::vector<v1::Job> jobs, int page_size,
                                            const std::string& page_token);

}  // namespace fsdpd::server
