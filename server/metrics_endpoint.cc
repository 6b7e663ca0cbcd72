#include "server/metrics_endpoint.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace fsdpd::server {
namespace {

constexpr std::chrono::milliseconds kRetryInterval(200);

// "HOST:PORT" or "[V6]:PORT" split into host (without brackets) and port; false if malformed.
bool SplitHostPort(const std::string& listen, std::string* host, std::string* port) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos || colon + 1 == listen.size()) return false;
  *host = listen.substr(0, colon);
  *port = listen.substr(colon + 1);
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']') {
    *host = host->substr(1, host->size() - 2);
  }
  return true;
}

}  // namespace

int ProbeBind(const std::string& listen) {
  std::string host, port;
  if (!SplitHostPort(listen, &host, &port)) return EINVAL;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &found) != 0 ||
      found == nullptr) {
    return EINVAL;
  }
  int error = 0;
  const int fd = socket(found->ai_family, found->ai_socktype, found->ai_protocol);
  if (fd < 0) {
    error = errno;
  } else {
    const int on = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    if (bind(fd, found->ai_addr, found->ai_addrlen) != 0) error = errno;
    close(fd);
  }
  freeaddrinfo(found);
  return error;
}

absl::StatusOr<std::unique_ptr<prometheus::Exposer>> OpenMetricsEndpoint(
    const std::string& listen, std::chrono::milliseconds retry_for) {
  const auto deadline = std::chrono::steady_clock::now() + retry_for;
  bool warned = false;
  while (true) {
    std::string failure;
    try {
      return std::make_unique<prometheus::Exposer>(listen);
    } catch (const std::exception& error) {
      failure = error.what();
    }
    // The HTTP server says only that it could not start; a bind of our own tells why.
    const int error = ProbeBind(listen);
    if (error != 0 && error != EADDRINUSE) {
      return absl::UnavailableError(
          absl::StrCat("metrics-listen: cannot serve ", listen, ": ", std::strerror(error),
                       "; serve metrics elsewhere with --metrics-listen"));
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      std::string host, port;
      SplitHostPort(listen, &host, &port);
      const std::string reason =
          error == EADDRINUSE ? absl::StrCat("port ", port, " is in use")
                              : absl::StrCat("the HTTP server did not start (", failure, ")");
      return absl::UnavailableError(absl::StrCat(
          "metrics-listen: cannot serve ", listen, ": ", reason, ", still after ",
          std::chrono::duration_cast<std::chrono::seconds>(retry_for).count(),
          " s of retrying; stop what holds it (another fsdpd?) or pick another address with "
          "--metrics-listen HOST:PORT (FSDPD_METRICS_LISTEN)"));
    }
    if (!warned) {
      spdlog::warn(
          "metrics-listen: {} is in use; retrying for up to {} s (a previous fsdpd may "
          "still be exiting)",
          listen, std::chrono::duration_cast<std::chrono::seconds>(retry_for).count());
      warned = true;
    }
    std::this_thread::sleep_for(kRetryInterval);
  }
}

}  // namespace fsdpd::server
