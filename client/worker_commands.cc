#include <iostream>

#include "client/commands.h"
#include "client/output.h"
#include "fsdpd/v1/jobs.grpc.pb.h"

namespace fsdpd::client {
namespace {

// One word for the HEALTH column; the reasons follow the table.
std::string HealthName(const v1::WorkerHealth& health) {
  if (!health.unhealthy().empty()) return "UNHEALTHY";
  if (!health.checkpoint_root_error().empty()) return "ROOT-UNWRITABLE";
  return "ok";
}

}  // namespace

int RunWorkers(const ClientOptions& options) {
  auto stub = v1::JobService::NewStub(Connect(options));
  v1::ListWorkersResponse response;
  grpc::ClientContext context;
  SetUnaryDeadline(&context);
  grpc::Status status = stub->ListWorkers(&context, v1::ListWorkersRequest(), &response);
  if (!status.ok()) return Fail(DescribeError(status, options));

  if (options.json) {
    nlohmann::json workers = nlohmann::json::array();
    for (const v1::Worker& worker : response.workers()) {
      nlohmann::json entry = WorkerToJson(worker);
      entry["unhealthy"] = worker.health().unhealthy();
      entry["checkpoint_root_error"] = worker.health().checkpoint_root_error();
      workers.push_back(std::move(entry));
    }
    std::cout << nlohmann::json{{"workers", workers}}.dump() << std::endl;
    return 0;
  }
  if (response.workers_size() == 0) {
    std::cout << "no workers" << std::endl;
    return 0;
  }
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> problems;  // printed under the table: too long for a column
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
                    FormatAge(worker.last_heartbeat_unix_millis()), HealthName(worker.health())});
    if (!worker.health().unhealthy().empty()) {
      problems.push_back(worker.id() + ": unhealthy: " + worker.health().unhealthy());
    }
    if (!worker.health().checkpoint_root_error().empty()) {
      problems.push_back(worker.id() + ": no jobs: " + worker.health().checkpoint_root_error());
    }
  }
  std::cout << FormatTable(
      {"ID", "HOST", "DEVICE", "MEMORY", "STATE", "JOB", "RANK", "HEARTBEAT", "HEALTH"}, rows);
  for (const std::string& problem : problems) std::cout << problem << std::endl;
  return 0;
}

}  // namespace fsdpd::client
