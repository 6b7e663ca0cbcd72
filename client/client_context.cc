#include "client/client_context.h"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "grpcpp/support/client_interceptor.h"
#include "proto/bearer_token.h"

namespace fsdpd::client {
namespace {

constexpr std::chrono::seconds kUnaryTimeout(10);

}  // namespace

std::string DefaultTokenPath() {
  if (const char* config = std::getenv("XDG_CONFIG_HOME"); config != nullptr && *config != '\0') {
    return std::string(config) + "/fsdpd/token";
  }
  const char* home = std::getenv("HOME");
  return std::string(home != nullptr ? home : ".") + "/.config/fsdpd/token";
}

std::string LoadCredentials(const std::string& tls_ca_path, const std::string& token_path,
                            bool token_path_explicit, ClientOptions* options) {
  if (!tls_ca_path.empty()) {
    std::ifstream file(tls_ca_path, std::ios::binary);
    if (!file) return "--tls-ca: cannot open " + tls_ca_path;
    std::ostringstream content;
    content << file.rdbuf();
    if (content.str().find("-----BEGIN CERTIFICATE") == std::string::npos) {
      return "--tls-ca: " + tls_ca_path + " holds no PEM certificate";
    }
    options->tls_ca_pem = content.str();
  }
  if (token_path.empty()) return "";
  // The default path is optional; one given with --token-file or FSDPD_TOKEN_FILE is not.
  if (!token_path_explicit && !std::filesystem::exists(token_path)) return "";
  std::string token;
  if (absl::Status loaded = LoadTokenFile(token_path, &token); !loaded.ok()) {
    return std::string(loaded.message());
  }
  options->token = token;
  return "";
}

std::shared_ptr<grpc::Channel> Connect(const ClientOptions& options) {
  grpc::ChannelArguments arguments;
  arguments.SetMaxReceiveMessageSize(-1);
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (!options.tls_ca_pem.empty()) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = options.tls_ca_pem;
    credentials = grpc::SslCredentials(ssl);
  }
  return grpc::experimental::CreateCustomChannelWithInterceptors(
      options.coordinator, credentials, arguments, BearerTokenInterceptors(options.token));
}

void SetUnaryDeadline(grpc::ClientContext* context) {
  context->set_deadline(std::chrono::system_clock::now() + kUnaryTimeout);
}

grpc::Status FetchJob(v1::JobService::Stub& stub, const std::string& job_id, v1::Job* job) {
  v1::GetJobRequest request;
  request.set_id(job_id);
  grpc::ClientContext context;
  SetUnaryDeadline(&context);
  return stub.GetJob(&context, request, job);
}

std::string DescribeInvalidArgument(const grpc::Status& status) {
  google::rpc::Status details;
  std::string lines;
  if (!status.error_details().empty() && details.ParseFromString(status.error_details())) {
    for (const google::protobuf::Any& detail : details.details()) {
      google::rpc::BadRequest bad_request;
      if (!detail.UnpackTo(&bad_request)) continue;
      for (const auto& violation : bad_request.field_violations()) {
        lines += "\n  " + violation.field() + ": " + violation.description();
      }
    }
  }
  return lines.empty() ? " " + status.error_message() : lines;
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
      // Only a missing job is "job ID not found"; a job without a profile window, a trace or an
      // export yet is said so in the coordinator's words.
      if (!job_id.empty() && status.error_message().rfind("no job with id", 0) == 0) {
        return "job " + job_id + " not found";
      }
      return status.error_message();
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "rejected by the coordinator:" + DescribeInvalidArgument(status);
    case grpc::StatusCode::UNAUTHENTICATED:
      return "not authenticated: " + status.error_message();
    case grpc::StatusCode::PERMISSION_DENIED:
      return "permission denied: " + status.error_message();
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
