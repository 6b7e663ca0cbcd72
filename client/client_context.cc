#include "client/client_context.h"

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "grpcpp/support/client_interceptor.h"

namespace fsdpd::client {
namespace {

constexpr std::chrono::seconds kUnaryTimeout(10);
constexpr size_t kMaxTokenBytes = 4096;

// Adds the bearer token to every call's initial metadata, so no verb has to remember it.
class BearerTokenInterceptor : public grpc::experimental::Interceptor {
 public:
  explicit BearerTokenInterceptor(const std::string* header) : header_(header) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->insert({"authorization", *header_});
    }
    methods->Proceed();
  }

 private:
  const std::string* header_;
};

class BearerTokenFactory : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit BearerTokenFactory(std::string token) : header_("Bearer " + std::move(token)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* info) override {
    return new BearerTokenInterceptor(&header_);
  }

 private:
  const std::string header_;
};

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
  std::ifstream file(token_path);
  if (!file) {
    return token_path_explicit ? "--token-file: cannot open " + token_path : "";
  }
  std::string token;
  std::getline(file, token);
  while (!token.empty() && (token.back() == '\r' || token.back() == ' ')) token.pop_back();
  if (token.empty() || token.size() > kMaxTokenBytes) {
    return "--token-file: the first line of " + token_path + " must hold the token (1.." +
           std::to_string(kMaxTokenBytes) + " characters)";
  }
  for (char c : token) {
    if (c <= ' ' || c == 0x7f) {
      return "--token-file: the token in " + token_path +
             " contains whitespace or control characters";
    }
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
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> interceptors;
  if (!options.token.empty()) {
    interceptors.push_back(std::make_unique<BearerTokenFactory>(options.token));
  }
  return grpc::experimental::CreateCustomChannelWithInterceptors(
      options.coordinator, credentials, arguments, std::move(interceptors));
}

void SetUnaryDeadline(grpc::ClientContext* context) {
  context->set_deadline(std::chrono::system_clock::now() + kUnaryTimeout);
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
