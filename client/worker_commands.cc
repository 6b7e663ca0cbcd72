#include <iostream>

#include "client/commands.h"
#include "client/output.h"
#include "fsdpd/v1/jobs.grpc.pb.h"

namespace fsdpd::client {

int RunWorkers(const ClientOptions& options) {
  auto stub = v1::JobService::NewStub(Connect(options));
  v1::ListWorkersResponse response;
  grpc::ClientContext context;
  SetUnaryDeadline(&context);
  grpc::Status status = stub->ListWorkers(&context, v1::ListWorkersRequest(), &response);
  if (!status.ok()) return Fail(DescribeError(status, options));

  if (options.json) {
    nlohmann::json workers = nlohmann::json::array();
    for (const v1::Worker& worker : response.workers()) workers.push_back(WorkerToJson(worker));
    std::cout << nlohmann::json{{"workers", workers}}.dump() << std::endl;
    return 0;
  }
  if (response.workers_size() == 0) {
    std::cout << "no workers" << std::endl;
    return 0;
  }
  std::vector<std::vector<std::string>> rows;
  for (const v1::Worker& worker : response.workers()) {
    std::string device = worker.device_kind();
    if (worker.device_kind() == "cuda") {
      device += ":" + std::to_string(worker.gpu_index());
      if (!worker.gpu_name().empty()) device += " " + worker.gpu_name();
    }
    rows.push_back({worker.id(), worker.hostname(), device, FormatBytes(worker.memory_bytes()),
                    WorkerStateName(worker.state()),
                    worker.job_id().empty() ? "-" : worker.job_id(),
                    worker.job_id().empty() ? "-" : std::to_string(worker.rank()),
                    FormatAge(worker.last_heartbeat_unix_millis())});
  }
  std::cout << FormatTable({"ID", "HOST", "DEVICE", "MEMORY", "STATE", "JOB", "RANK", "HEARTBEAT"},
                           rows);
  return 0;
}

}  // namespace fsdpd::client
