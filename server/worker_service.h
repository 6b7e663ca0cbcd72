// WorkerService: Register, and the Session stream each worker keeps open (heartbeats, step
// reports, logs, results and artifacts up; assignments and cancellations down).
#pragma once

#include <memory>

#include "fsdpd/v1/worker.grpc.pb.h"
#include "server/auth.h"
#include "server/job_manager.h"
#include "server/metrics_exporter.h"
#include "server/peer_rate_limiter.h"

namespace fsdpd::server {

// Hands session messages to the job manager in runs, without gRPC's threads waiting for its
// lock (see worker_service.cc).
class SessionDispatcher;

class WorkerServiceImpl : public v1::WorkerService::CallbackService {
 public:
  // authenticator may be null (tests): then no credential is asked for. Every RPC needs a
  // worker credential when the authenticator asks for one (Authenticator::AuthenticateWorker);
  // Register is also limited per peer address (WorkerRegistryConfig::register_rate_per_peer).
  WorkerServiceImpl(JobManager& jobs, MetricsExporter* metrics,
                    const Authenticator* authenticator = nullptr);
  // Handles what is still queued. Destroy after the gRPC server has shut down and before the
  // job manager.
  ~WorkerServiceImpl() override;

  grpc::ServerUnaryReactor* Register(grpc::CallbackServerContext* context,
                                     const v1::RegisterRequest* request,
                                     v1::RegisterResponse* response) override;
  grpc::ServerBidiReactor<v1::WorkerMessage, v1::CoordinatorMessage>* Session(
      grpc::CallbackServerContext* context) override;

 private:
  grpc::Status CheckCaller(grpc::CallbackServerContext* context, std::string* principal) const;

  JobManager& jobs_;
  MetricsExporter* metrics_;
  const Authenticator* authenticator_;
  std::unique_ptr<SessionDispatcher> dispatcher_;
  PeerRateLimiter register_limiter_;
};

}  // namespace fsdpd::server
