// The bearer token a client of the coordinator sends: read from a --token-file and added to
// every call. fsdpctl sends a user's token (viewer, submitter, admin), fsdpd-worker a worker's
// (Register, Session, rendezvous); server/auth.h checks them.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "grpcpp/support/client_interceptor.h"

namespace fsdpd {

// The first line of the file, trailing whitespace removed: 1..4096 printable characters
// without whitespace. Errors name the flag and the file.
absl::Status LoadTokenFile(const std::string& path, std::string* token);

// The interceptors that add `authorization: Bearer <token>` to every call; none for "".
std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
BearerTokenInterceptors(const std::string& token);

}  // namespace fsdpd
