#include "client/client_context.h"

#include <chrono>
#include <iostream>

#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace fsdpd::client {
namespace {

constexpr std::chrono::seconds kUnaryTimeout(10);

}  // namespace

std::shared_ptr<grpc::Channel> Connect(const ClientOptions& options) {
  grpc::ChannelArguments arguments;
  arguments.SetMaxReceiveMessageSize(-1);
  return grpc::CreateCustomChannel(options.coordinator, grpc::InsecureChannelCredentials(),
                                   arguments);
}

void SetUnaryDeadline(grpc::ClientContext* context) {
  context->set_deadline(std::chrono::system_clock::now() + kUnaryTimeout);
}

std::string DescribeError(const grpc::Status& status, const ClientOptions& options,
                          const std::string& job_id) {
  switch (status.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
      return "cannot reach the coordinator at " + options.coordinator + " (" +
             status.error_message() + ")";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "cannot reach the coordinator at " + options.coordinator + ": no answer within " +
             std::to_string(kUnaryTimeout.count()) + "s";
    case grpc::StatusCode::NOT_FOUND:
      if (!job_id.empty()) return "job " + job_id + " not found";
      return status.error_message();
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "rejected by the coordinator: " + status.error_message();
    default:
      return status.error_message().empty()
                 ? "the coordinator answered with error code " +
                       std::to_string(static_cast<int>(status.error_code()))
                 : status.error_message();
  }
}

int Fail(const std::string& message) {
  std::cerr << "fsdpctl: " << message << std::endl;
  return 1;
}

}  // namespace fsdpd::client
