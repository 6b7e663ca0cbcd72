#include "server/unparsable_request_interceptor.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "grpcpp/support/interceptor.h"
#include "grpcpp/support/status.h"

namespace fsdpd::server {
namespace {

using grpc::experimental::InterceptionHookPoints;

class UnparsableRequestInterceptor : public grpc::experimental::Interceptor {
 public:
  explicit UnparsableRequestInterceptor(grpc::experimental::ServerRpcInfo* info) : info_(info) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    // gRPC hands the interceptors no message when the request did not parse.
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_MESSAGE) &&
        methods->GetRecvMessage() == nullptr) {
      unparsable_ = true;
    }
    // No handler ran: the status is gRPC's own (UNIMPLEMENTED on the callback API, INTERNAL on
    // the synchronous one), both without a message.
    if (unparsable_ &&
        methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS) &&
        !methods->GetSendStatus().ok()) {
      methods->ModifySendStatus(grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          absl::StrCat(info_->method(),
                       ": the request is not a valid message: every string field (a job's name, "
                       "paths, keywords) must hold UTF-8 text, and one here does not, or the "
                       "message is malformed")));
    }
    methods->Proceed();
  }

 private:
  grpc::experimental::ServerRpcInfo* info_;
  bool unparsable_ = false;
};

class UnparsableRequestFactory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    using Type = grpc::experimental::ServerRpcInfo::Type;
    if (info->type() != Type::UNARY && info->type() != Type::SERVER_STREAMING) return nullptr;
    return new UnparsableRequestInterceptor(info);
  }
};

}  // namespace

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
UnparsableRequestInterceptors() {
  return std::make_unique<UnparsableRequestFactory>();
}

}  // namespace fsdpd::server
