// What every fsdpctl verb shares: where the coordinator is, the output mode, and how a failed
// call becomes a message a user can act on.
#pragma once

#include <memory>
#include <string>

#include "fsdpd/v1/jobs.grpc.pb.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/status.h"

namespace fsdpd::client {

struct ClientOptions {
  std::string coordinator = "127.0.0.1:7070";
  bool json = false;
  // PEM CA bundle; non-empty: the channel uses TLS and verifies the coordinator against it.
  std::string tls_ca_pem;
  // Sent as `authorization: Bearer <token>` on every call when non-empty.
  std::string token;
};

// Fills tls_ca_pem from tls_ca_path and token from token_path. An empty tls_ca_path means
// plaintext. token_path_explicit: the user named the token file (flag or environment), so a
// missing file is an error; the default path (~/.config/fsdpd/token) may be absent. Returns an
// error message, empty on success.
std::string LoadCredentials(const std::string& tls_ca_path, const std::string& token_path,
                            bool token_path_explicit, ClientOptions* options);

// Where fsdpctl looks for a token when neither --token-file nor FSDPD_TOKEN_FILE is given.
std::string DefaultTokenPath();

std::shared_ptr<grpc::Channel> Connect(const ClientOptions& options);

// Unary calls give up after this long, so a coordinator that does not answer is reported.
void SetUnaryDeadline(grpc::ClientContext* context);
// One GetJob call under the unary deadline.
grpc::Status FetchJob(v1::JobService::Stub& stub, const std::string& job_id, v1::Job* job);

// An INVALID_ARGUMENT's field violations (google.rpc.BadRequest in the status details), one per
// line as "\n  field: description"; " " and the status message where the details hold none. It
// follows a "...:" prefix.
std::string DescribeInvalidArgument(const grpc::Status& status);

// "cannot reach the coordinator at ADDR", "job ID not found", the server's reason otherwise.
std::string DescribeError(const grpc::Status& status, const ClientOptions& options,
                          const std::string& job_id = "");

// Prints "fsdpctl: <message>" to stderr and returns the exit status for a failure.
int Fail(const std::string& message);

}  // namespace fsdpd::client
