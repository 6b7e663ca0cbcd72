// The HTTP endpoint of --metrics-listen (Prometheus' /metrics).
//
// A coordinator started right after another one on the same address stopped (a restart, a
// systemd Restart=) can find the port still held: the old process lets go of it only as it
// exits, which can be seconds after its SIGTERM. OpenMetricsEndpoint therefore retries while
// the address is in use, for at most `retry_for`, and then fails with an error that names the
// address, the port and --metrics-listen; any other bind error fails at once, with its reason.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "prometheus/exposer.h"

namespace fsdpd::server {

inline constexpr std::chrono::seconds kMetricsBindRetry{15};

absl::StatusOr<std::unique_ptr<prometheus::Exposer>> OpenMetricsEndpoint(
    const std::string& listen, std::chrono::milliseconds retry_for = kMetricsBindRetry);

// What binding a TCP socket to `listen` ("HOST:PORT", "[V6]:PORT") with SO_REUSEADDR, as the
// HTTP server does, returns: 0 when it binds (the socket is closed again at once), else the
// errno (EADDRINUSE while another socket listens there). EINVAL when `listen` does not resolve.
int ProbeBind(const std::string& listen);

}  // namespace fsdpd::server
