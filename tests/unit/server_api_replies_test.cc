// The job service's shared answers: BadRequest details, Timestamps, newest-first pages.
#include <gtest/gtest.h>

#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"
#include "server/api_replies.h"

namespace fsdpd::server {
namespace {

TEST(InvalidArgumentTest, CarriesOneBadRequestViolationPerFieldAndKeepsTheMessage) {
  grpc::Status status = InvalidArgument(
      std::vector<FieldError>{{"model.dim", "must be positive"}, {"train.lr", "too large"}});
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(),
            FormatFieldErrors({{"model.dim", "must be positive"}, {"train.lr", "too large"}}));
  google::rpc::Status details;
  ASSERT_TRUE(details.ParseFromString(status.error_details()));
  EXPECT_EQ(details.code(), static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
  ASSERT_EQ(details.details_size(), 1);
  EXPECT_EQ(details.details(0).type_url(), "type.googleapis.com/google.rpc.BadRequest");
  google::rpc::BadRequest bad_request;
  ASSERT_TRUE(details.details(0).UnpackTo(&bad_request));
  ASSERT_EQ(bad_request.field_violations_size(), 2);
  EXPECT_EQ(bad_request.field_violations(0).field(), "model.dim");
  EXPECT_EQ(bad_request.field_violations(1).description(), "too large");
}

TEST(SetJobTimestampsTest, MirrorsTheMillisAndLeavesZeroUnset) {
  v1::Job job;
  job.set_created_unix_millis(1700000000123);
  SetJobTimestamps(&job);
  EXPECT_EQ(job.create_time().seconds(), 1700000000);
  EXPECT_EQ(job.create_time().nanos(), 123000000);
  EXPECT_FALSE(job.has_start_time());
  EXPECT_FALSE(job.has_finish_time());
  v1::StateChange* change = job.add_transitions();
  change->set_unix_millis(1700000000456);
  SetJobTimestamps(&job);
  EXPECT_EQ(job.transitions(0).time().seconds(), 1700000000);
  EXPECT_EQ(job.transitions(0).time().nanos(), 456000000);
}

std::vector<v1::Job> Jobs(int count) {
  std::vector<v1::Job> jobs;
  for (int i = 1; i <= count; ++i) {
    v1::Job job;
    job.set_id("job-00000" + std::to_string(i));
    job.set_created_unix_millis(1000 + i / 2);  // pairs share a millisecond: the id decides
    jobs.push_back(job);
  }
  return jobs;
}

TEST(PageJobsNewestFirstTest, PagesCoverEveryJobOnceNewestFirst) {
  std::vector<std::string> seen;
  std::string token;
  int pages = 0;
  do {
    absl::StatusOr<JobPage> page = PageJobsNewestFirst(Jobs(5), 2, token);
    ASSERT_TRUE(page.ok()) << page.status();
    ASSERT_LE(page->jobs.size(), 2u);
    for (const v1::Job& job : page->jobs) seen.push_back(job.id());
    token = page->next_page_token;
    ASSERT_LT(++pages, 10);
  } while (!token.empty());
  EXPECT_EQ(pages, 3);
  EXPECT_EQ(seen, (std::vector<std::string>{"job-000005", "job-000004", "job-000003", "job-000002",
                                            "job-000001"}));
}

TEST(PageJobsNewestFirstTest, ZeroPageSizeListsAllAndABadTokenIsRefused) {
  absl::StatusOr<JobPage> all = PageJobsNewestFirst(Jobs(3), 0, "");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->jobs.size(), 3u);
  EXPECT_TRUE(all->next_page_token.empty());
  EXPECT_EQ(PageJobsNewestFirst(Jobs(3), 1, "garbage").status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fsdpd::server
