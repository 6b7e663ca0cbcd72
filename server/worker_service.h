// WorkerService: Register, and the Session stream each worker keeps open (heartbeats, step
// reports, logs, results and artifacts up; assignments and cancellations down).
#pragma once

#include "fsdpd/v1/worker.grpc.pb.h"
#include "server/job_manager.h"
#include "server/metrics_exporter.h"

namespace fsdpd::server {

class WorkerServiceImpl : public v1::WorkerService::CallbackService {
 public:
  WorkerServiceImpl(JobManager& jobs, MetricsExporter* metrics) : jobs_(jobs), metrics_(metrics) {}

  grpc::ServerUnaryReactor* Register(grpc::CallbackServerContext* context,
                                     const v1::RegisterRequest* request,
                                     v1::RegisterResponse* response) override;
  grpc::ServerBidiReactor<v1::WorkerMessage, v1::CoordinatorMessage>* Session(
      grpc::CallbackServerContext* context) override;

 private:
  JobManager& jobs_;
  MetricsExporter* metrics_;
};

}  // namespace fsdpd::server
