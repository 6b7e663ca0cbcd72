// The worker's bearer token: read from --token-file and sent on every call the worker makes
// (Register, Session, rendezvous), so a coordinator with --tokens-file knows it as a worker
// (a token with the role `worker`, server/auth.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "grpcpp/support/client_interceptor.h"

namespace fsdpd {

// The first line of the file, trailing whitespace removed: 1..4096 printable characters
// without whitespace. Errors name the flag and the file.
absl::Status LoadWorkerToken(const std::string& path, std::string* token);

// The interceptors that add `authorization: Bearer <token>` to every call; none for "".
std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
BearerTokenInterceptors(const std::string& token);

}  // namespace fsdpd
