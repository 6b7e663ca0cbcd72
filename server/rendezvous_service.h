// RendezvousService: the ranks' key-value store. A Get that has to wait parks in the
// RendezvousStore and is finished from there, so no gRPC thread blocks.
#pragma once

#include "fsdpd/v1/rendezvous.grpc.pb.h"
#include "server/auth.h"
#include "server/metrics_exporter.h"
#include "server/rendezvous_store.h"
#include "server/worker_registry.h"

namespace fsdpd::server {

class RendezvousServiceImpl : public v1::RendezvousService::CallbackService {
 public:
  // authenticator may be null (tests): then no credential is asked for. workers may be null
  // (tests): then any caller may use any scope, sized for one rank. Otherwise only a caller whose
  // credential is bound to a worker the coordinator assigned a rank of (job, attempt) may read or
  // write the attempt's keys (a worker's own claim does not count), and the attempt's assigned
  // ranks size the scope's bounds (RendezvousConfig).
  RendezvousServiceImpl(RendezvousStore& store, MetricsExporter* metrics,
                        const Authenticator* authenticator = nullptr,
                        const WorkerRegistry* workers = nullptr)
      : store_(store), metrics_(metrics), authenticator_(authenticator), workers_(workers) {}

  grpc::ServerUnaryReactor* Set(grpc::CallbackServerContext* context, const v1::SetRequest* request,
                                v1::SetResponse* response) override;
  grpc::ServerUnaryReactor* Get(grpc::CallbackServerContext* context, const v1::GetRequest* request,
                                v1::GetResponse* response) override;
  grpc::ServerUnaryReactor* GetMany(grpc::CallbackServerContext* context,
                                    const v1::GetManyRequest* request,
                                    v1::GetManyResponse* response) override;
  grpc::ServerUnaryReactor* Add(grpc::CallbackServerContext* context, const v1::AddRequest* request,
                                v1::AddResponse* response) override;

 private:
  grpc::ServerUnaryReactor* Reply(grpc::CallbackServerContext* context, const char* method,
                                  const absl::Status& status);
  // The credential, then the scope: UNAUTHENTICATED, PERMISSION_DENIED or OK with the
  // attempt's ranks in *ranks.
  grpc::Status CheckCaller(grpc::CallbackServerContext* context, const v1::Scope& scope,
                           int* ranks) const;
  grpc::ServerUnaryReactor* Refuse(grpc::CallbackServerContext* context, const char* method,
                                   const grpc::Status& status);

  RendezvousStore& store_;
  MetricsExporter* metrics_;
  const Authenticator* authenticator_;
  const WorkerRegistry* workers_;
};

}  // namespace fsdpd::server
