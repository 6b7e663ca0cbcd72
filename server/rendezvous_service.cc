#include "server/rendezvous_service.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "server/grpc_util.h"

namespace fsdpd::server {

grpc::ServerUnaryReactor* RendezvousServiceImpl::Reply(grpc::CallbackServerContext* context,
                                                       const char* method,
                                                       const absl::Status& status) {
  if (metrics_ != nullptr) metrics_->CountRpc(method, static_cast<int>(status.code()));
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

grpc::ServerUnaryReactor* RendezvousServiceImpl::Refuse(grpc::CallbackServerContext* context,
                                                        const char* method,
                                                        const grpc::Status& status) {
  if (metrics_ != nullptr) metrics_->CountRpc(method, status.error_code());
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

grpc::Status RendezvousServiceImpl::CheckCaller(grpc::CallbackServerContext* context,
                                                const v1::Scope& scope, int* ranks) const {
  std::string principal;
  if (authenticator_ != nullptr) {
    if (grpc::Status status = authenticator_->AuthenticateWorker(*context, &principal);
        !status.ok()) {
      return status;
    }
  }
  *ranks = 1;
  if (workers_ == nullptr) return grpc::Status::OK;
  // Only what the coordinator assigned counts: a worker's claim at registration is no standing.
  const AttemptStanding standing = workers_->Standing(principal, scope.job_id(), scope.attempt());
  if (!standing.runs) {
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        absl::StrCat("rendezvous scope ",
                                     RendezvousStore::ScopeName(scope.job_id(), scope.attempt()),
                                     " belongs to the ranks of that attempt; this credential "
                                     "runs none of them"));
  }
  *ranks = standing.ranks;
  return grpc::Status::OK;
}

grpc::ServerUnaryReactor* RendezvousServiceImpl::Set(grpc::CallbackServerContext* context,
                                                     const v1::SetRequest* request,
                                                     v1::SetResponse* response) {
  int ranks = 0;
  if (grpc::Status allowed = CheckCaller(context, request->scope(), &ranks); !allowed.ok()) {
    return Refuse(context, "Set", allowed);
  }
  return Reply(context, "Set",
               store_.Set(request->scope().job_id(), request->scope().attempt(), request->key(),
                          request->value(), ranks));
}

grpc::ServerUnaryReactor* RendezvousServiceImpl::Get(grpc::CallbackServerContext* context,
                                                     const v1::GetRequest* request,
                                                     v1::GetResponse* response) {
  int ranks = 0;
  if (grpc::Status allowed = CheckCaller(context, request->scope(), &ranks); !allowed.ok()) {
    return Refuse(context, "Get", allowed);
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  MetricsExporter* metrics = metrics_;
  store_.Get(request->scope().job_id(), request->scope().attempt(), request->key(),
             std::chrono::milliseconds(request->timeout_millis()),
             [reactor, response, metrics](absl::StatusOr<std::string> value) {
               if (value.ok()) response->set_value(std::move(*value));
               if (metrics != nullptr) {
                 metrics->CountRpc("Get", static_cast<int>(value.status().code()));
               }
               reactor->Finish(ToGrpcStatus(value.status()));
             });
  return reactor;
}

grpc::ServerUnaryReactor* RendezvousServiceImpl::GetMany(grpc::CallbackServerContext* context,
                                                         const v1::GetManyRequest* request,
                                                         v1::GetManyResponse* response) {
  int ranks = 0;
  if (grpc::Status allowed = CheckCaller(context, request->scope(), &ranks); !allowed.ok()) {
    return Refuse(context, "GetMany", allowed);
  }
  std::vector<RendezvousStore::KeyPart> keys;
  keys.reserve(request->keys_size());
  for (const v1::KeyPart& asked : request->keys()) {
    keys.push_back({asked.key(), asked.part(), asked.parts()});
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  MetricsExporter* metrics = metrics_;
  store_.GetMany(
      request->scope().job_id(), request->scope().attempt(), std::move(keys),
      std::chrono::milliseconds(request->timeout_millis()),
      [reactor, response, metrics](absl::StatusOr<std::vector<std::string>> values) {
        if (values.ok()) {
          for (std::string& value : *values) response->add_values(std::move(value));
        }
        if (metrics != nullptr) {
          metrics->CountRpc("GetMany", static_cast<int>(values.status().code()));
        }
        reactor->Finish(ToGrpcStatus(values.status()));
      },
      ranks);
  return reactor;
}

grpc::ServerUnaryReactor* RendezvousServiceImpl::Add(grpc::CallbackServerContext* context,
                                                     const v1::AddRequest* request,
                                                     v1::AddResponse* response) {
  int ranks = 0;
  if (grpc::Status allowed = CheckCaller(context, request->scope(), &ranks); !allowed.ok()) {
    return Refuse(context, "Add", allowed);
  }
  absl::StatusOr<int64_t> value = store_.Add(request->scope().job_id(), request->scope().attempt(),
                                             request->key(), request->delta(), ranks);
  if (value.ok()) response->set_value(*value);
  return Reply(context, "Add", value.status());
}

}  // namespace fsdpd::server
