// A request that does not parse as its method's message (a string field holding bytes that are
// not UTF-8, which proto3 refuses; a malformed message) is refused by gRPC before any handler
// runs, with UNIMPLEMENTED (INTERNAL on the synchronous API) and no message: to the caller, a
// method the coordinator lacks, or its own fault. These interceptors turn that answer into
// INVALID_ARGUMENT saying what a request must hold.
//
// Only unary and server-streaming methods: gRPC parses their one request before the handler. A
// stream's messages are parsed as the handler reads them, and the handler answers for them.
#pragma once

#include <memory>

#include "grpcpp/support/server_interceptor.h"

namespace fsdpd::server {

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
UnparsableRequestInterceptors();

}  // namespace fsdpd::server
