#include <iostream>

#include "client/commands.h"
#include "client/output.h"
#include "fsdpd/v1/jobs.grpc.pb.h"

namespace fsdpd::client {

int RunLogs(const ClientOptions& options, const std::string& job_id, bool follow, int64_t tail) {
  if (tail < 0) return Fail("--tail: must not be negative");
  auto stub = v1::JobService::NewStub(Connect(options));
  v1::GetJobLogsRequest request;
  request.set_id(job_id);
  request.set_follow(follow);
  request.set_tail(tail);
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReader<v1::LogLine>> reader = stub->GetJobLogs(&context, request);
  v1::LogLine line;
  while (reader->Read(&line)) {
    if (options.json) {
      std::cout << LogLineToJson(line).dump() << std::endl;
    } else {
      std::cout << FormatTime(line.unix_millis()) << "  rank " << line.rank() << "  "
                << line.level() << "  " << line.text() << std::endl;
    }
  }
  grpc::Status status = reader->Finish();
  if (!status.ok()) return Fail(DescribeError(status, options, job_id));
  return 0;
}

}  // namespace fsdpd::client
