// RendezvousService: the ranks' key-value store. A Get that has to wait parks in the
// RendezvousStore and is finished from there, so no gRPC thread blocks.
#pragma once

#include "fsdpd/v1/rendezvous.grpc.pb.h"
#include "server/auth.h"
#include "server/metrics_exporter.h"
#include "server/rendezvous_store.h"

namespace fsdpd::server {

class RendezvousServiceImpl : public v1::RendezvousService::CallbackService {
 public:
  // authenticator may be null (tests): then no client certificate is asked for.
  RendezvousServiceImpl(RendezvousStore& store, MetricsExporter* metrics,
                        const Authenticator* authenticator = nullptr)
      : store_(store), metrics_(metrics), authenticator_(authenticator) {}

  grpc::ServerUnaryReactor* Set(grpc::CallbackServerContext* context, const v1::SetRequest* request,
                                v1::SetResponse* response) override;
  grpc::ServerUnaryReactor* Get(grpc::CallbackServerContext* context, const v1::GetRequest* request,
                                v1::GetResponse* response) override;
  grpc::ServerUnaryReactor* Add(grpc::CallbackServerContext* context, const v1::AddRequest* request,
                                v1::AddResponse* response) override;

 private:
  grpc::ServerUnaryReactor* Reply(grpc::CallbackServerContext* context, const char* method,
                                  const absl::Status& status);
  grpc::Status CheckCaller(grpc::CallbackServerContext* context) const;

  RendezvousStore& store_;
  MetricsExporter* metrics_;
  const Authenticator* authenticator_;
};

}  // namespace fsdpd::server
