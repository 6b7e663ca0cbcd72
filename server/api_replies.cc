#include "server/api_replies.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"
#include "server/job_manager.h"

namespace fsdpd::server {

grpc::Status InvalidArgument(const std::vector<FieldError>& errors) {
  google::rpc::BadRequest bad_request;
  for (const FieldError& error : errors) {
    google::rpc::BadRequest::FieldViolation* violation = bad_request.add_field_violations();
    violation->set_field(error.field);
    violation->set_description(error.message);
  }
  const std::string message = FormatFieldErrors(errors);
  google::rpc::Status details;
  details.set_code(static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
  details.set_message(message);
  details.add_details()->PackFrom(bad_request);
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, message, details.SerializeAsString());
}

grpc::Status InvalidArgument(std::string field, std::string description) {
  return InvalidArgument(std::vector<FieldError>{{std::move(field), std::move(description)}});
}

grpc::Status NoProfileWindow(const v1::Job& job, int rank, const std::string& what) {
  const v1::ProfileSpec& window = job.spec().profile();
  const std::string spec_window =
      window.steps() > 0
          ? absl::StrCat("its spec's window (", window.steps(), " step(s) from ",
                         window.start_step() > 0 ? absl::StrCat("step ", window.start_step())
                                                 : std::string("the first step"),
                         ")")
          : "";
  const std::string ask =
      absl::StrCat("ask for a window with `fsdpctl profile ", job.id(), " --steps K`");
  std::string advice;
  if (IsTerminal(job.state())) {
    advice = absl::StrCat(
        ": it ended as ", v1::JobState_Name(job.state()),
        spec_window.empty() ? " without a profiling window" : " before " + spec_window + " ran",
        ", and a finished job records none; to profile it, submit its spec again with "
        "profile: {steps: K}");
  } else if (job.state() == v1::SCHEDULED || job.state() == v1::RUNNING) {
    advice = absl::StrCat(" yet: ", spec_window.empty() ? "" : spec_window + " has not run; ", ask,
                          ", and it is here once those steps have run");
  } else {
    advice = absl::StrCat(
        " yet: it is ", v1::JobState_Name(job.state()), "; ",
        spec_window.empty() ? "once it runs, " + ask : spec_window + " is recorded once it runs");
  }
  return grpc::Status(grpc::StatusCode::NOT_FOUND, absl::StrCat("job ", job.id(), " has no ", what,
                                                                " from rank ", rank, advice));
}

namespace {

void SetTimestamp(int64_t unix_millis, google::protobuf::Timestamp* time) {
  time->set_seconds(unix_millis / 1000);
  time->set_nanos(static_cast<int32_t>(unix_millis % 1000) * 1000000);
}

// The sort key of a job: newer first, then the larger id first.
std::tuple<int64_t, std::string> Key(const v1::Job& job) {
  return {job.created_unix_millis(), job.id()};
}

// "<created_unix_millis>/<id>" of the page's last job: the next page starts after it, even if
// that job has since left the filtered states.
std::string Token(const v1::Job& job) {
  return absl::StrCat(job.created_unix_millis(), "/", job.id());
}

}  // namespace

void SetJobTimestamps(v1::Job* job) {
  if (job->created_unix_millis() > 0)
    SetTimestamp(job->created_unix_millis(), job->mutable_create_time());
  if (job->started_unix_millis() > 0)
    SetTimestamp(job->started_unix_millis(), job->mutable_start_time());
  if (job->finished_unix_millis() > 0) {
    SetTimestamp(job->finished_unix_millis(), job->mutable_finish_time());
  }
  for (v1::StateChange& change : *job->mutable_transitions()) {
    if (change.unix_millis() > 0) SetTimestamp(change.unix_millis(), change.mutable_time());
  }
}

absl::StatusOr<JobPage> PageJobsNewestFirst(std::vector<v1::Job> jobs, int page_size,
                                            const std::string& page_token) {
  std::sort(jobs.begin(), jobs.end(),
            [](const v1::Job& a, const v1::Job& b) { return Key(a) > Key(b); });
  auto begin = jobs.begin();
  if (!page_token.empty()) {
    const size_t slash = page_token.find('/');
    int64_t millis = 0;
    if (slash == std::string::npos || slash + 1 == page_token.size() ||
        !absl::SimpleAtoi(page_token.substr(0, slash), &millis)) {
      return absl::InvalidArgumentError(
          "not a token from an earlier ListJobs answer (next_page_token)");
    }
    const std::tuple<int64_t, std::string> after{millis, page_token.substr(slash + 1)};
    begin = std::find_if(jobs.begin(), jobs.end(),
                         [&](const v1::Job& job) { return Key(job) < after; });
  }
  JobPage page;
  const size_t size = page_size <= 0 ? jobs.size() : std::min(page_size, kMaxPageSize);
  auto end = jobs.end();
  if (static_cast<size_t>(end - begin) > size) end = begin + static_cast<std::ptrdiff_t>(size);
  page.jobs.assign(std::make_move_iterator(begin), std::make_move_iterator(end));
  if (end != jobs.end() && !page.jobs.empty()) page.next_page_token = Token(page.jobs.back());
  return page;
}

}  // namespace fsdpd::server
