// WorkerService: Register, and the Session stream each worker keeps open (heartbeats, step
// reports, logs, results and artifacts up; assignments and cancellations down).
#pragma once

#include "fsdpd/v1/worker.grpc.pb.h"
#include "server/auth.h"
#include "server/job_manager.h"
#include "server/metrics_exporter.h"

namespace fsdpd::server {

class WorkerServiceImpl : public v1::WorkerService::CallbackService {
 public:
  // authenticator may be null (tests): then no client certificate is asked for.
  WorkerServiceImpl(JobManager& jobs, MetricsExporter* metrics,
                    const Authenticator* authenticator = nullptr)
      : jobs_(jobs), metrics_(metrics), authenticator_(authenticator) {}

  grpc::ServerUnaryReactor* Register(grpc::CallbackServerContext* context,
                                     const v1::RegisterRequest* request,
                                     v1::RegisterResponse* response) override;
  grpc::ServerBidiReactor<v1::WorkerMessage, v1::CoordinatorMessage>* Session(
      grpc::CallbackServerContext* context) override;

 private:
  grpc::Status CheckCaller(grpc::CallbackServerContext* context) const;

  JobManager& jobs_;
  MetricsExporter* metrics_;
  const Authenticator* authenticator_;
};

}  // namespace fsdpd::server
