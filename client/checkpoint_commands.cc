// fsdpctl checkpoints JOB: the job's complete checkpoints, newest first, as an 80-column table
// (or JSON with --json).
#include <algorithm>
#include <iostream>

#include "absl/strings/str_join.h"
#include "client/commands.h"
#include "client/output.h"
#include "fsdpd/v1/jobs.grpc.pb.h"

namespace fsdpd::client {
namespace {

constexpr size_t kTableColumns = 80;

int64_t UnixMillis(const google::protobuf::Timestamp& time) {
  return time.seconds() * 1000 + time.nanos() / 1000000;
}

// The hosts cut to `width` columns: "a, b" whole when it fits, else the first ones and "+N".
std::string HostsCell(const v1::Checkpoint& checkpoint, size_t width) {
  if (checkpoint.hosts().empty()) return "-";
  const std::vector<std::string> hosts(checkpoint.hosts().begin(), checkpoint.hosts().end());
  for (size_t shown = hosts.size(); shown >= 1; --shown) {
    std::string text = absl::StrJoin(hosts.begin(), hosts.begin() + shown, ",");
    if (shown < hosts.size()) text += " +" + std::to_string(hosts.size() - shown);
    if (text.size() <= width) return text;
  }
  std::string text = hosts.front();
  if (width < 2) return text.substr(0, width);
  return text.substr(0, width - 1) + "~";
}

}  // namespace

int RunCheckpoints(const ClientOptions& options, const std::string& job_id) {
  auto stub = v1::JobService::NewStub(Connect(options));
  v1::ListCheckpointsRequest request;
  request.set_id(job_id);
  v1::ListCheckpointsResponse response;
  grpc::ClientContext context;
  SetUnaryDeadline(&context);
  grpc::Status status = stub->ListCheckpoints(&context, request, &response);
  if (!status.ok()) return Fail(DescribeError(status, options, job_id));

  if (options.json) {
    nlohmann::json checkpoints = nlohmann::json::array();
    for (const v1::Checkpoint& checkpoint : response.checkpoints()) {
      checkpoints.push_back({{"step", checkpoint.step()},
                             {"commit_unix_millis", UnixMillis(checkpoint.commit_time())},
                             {"size_bytes", checkpoint.size_bytes()},
                             {"attempt", checkpoint.attempt()},
                             {"world_size", checkpoint.world_size()},
                             {"hosts", std::vector<std::string>(checkpoint.hosts().begin(),
                                                                checkpoint.hosts().end())}});
    }
    std::cout << nlohmann::json{{"job_id", job_id}, {"checkpoints", checkpoints}}.dump()
              << std::endl;
    return 0;
  }
  if (response.checkpoints_size() == 0) {
    std::cout << "job " << job_id << " has no complete checkpoint" << std::endl;
    return 0;
  }
  const std::vector<std::string> headers = {"STEP",    "COMMITTED", "SIZE",
                                            "ATTEMPT", "WORLD",     "HOSTS"};
  std::vector<std::vector<std::string>> rows;
  for (const v1::Checkpoint& checkpoint : response.checkpoints()) {
    rows.push_back({std::to_string(checkpoint.step()),
                    FormatTime(UnixMillis(checkpoint.commit_time())),
                    FormatBytes(checkpoint.size_bytes()), std::to_string(checkpoint.attempt()),
                    std::to_string(checkpoint.world_size()), ""});
  }
  // The hosts get what the other columns leave of 80 (two spaces between columns).
  size_t used = 0;
  for (size_t column = 0; column + 1 < headers.size(); ++column) {
    size_t width = headers[column].size();
    for (const auto& row : rows) width = std::max(width, row[column].size());
    used += width + 2;
  }
  const size_t host_width = used + 5 < kTableColumns ? kTableColumns - used : 5;
  for (int index = 0; index < response.checkpoints_size(); ++index) {
    rows[index].back() = HostsCell(response.checkpoints(index), host_width);
  }
  std::cout << FormatTable(headers, rows);
  return 0;
}

}  // namespace fsdpd::client
