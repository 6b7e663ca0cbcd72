// What every fsdpctl verb shares: where the coordinator is, the output mode, and how a failed
// call becomes a message a user can act on.
#pragma once

#include <memory>
#include <string>

#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/status.h"

namespace fsdpd::client {

struct ClientOptions {
  std::string coordinator = "127.0.0.1:7070";
  bool json = false;
};

std::shared_ptr<grpc::Channel> Connect(const ClientOptions& options);

// Unary calls give up after this long, so a coordinator that does not answer is reported.
void SetUnaryDeadline(grpc::ClientContext* context);

// "cannot reach the coordinator at ADDR", "job ID not found", the server's reason otherwise.
std::string DescribeError(const grpc::Status& status, const ClientOptions& options,
                          const std::string& job_id = "");

// Prints "fsdpctl: <message>" to stderr and returns the exit status for a failure.
int Fail(const std::string& message);

}  // namespace fsdpd::client
