// Who may call what. Two independent mechanisms:
//  - Bearer tokens for the JobService (fsdpctl): the coordinator keeps only SHA-256 digests of
//    the tokens, each with a role and a name, read from --tokens-file. Without a tokens file
//    authentication is off, which is the loopback-only default.
//  - Client certificates for the WorkerService and RendezvousService: with --tls-client-ca the
//    server asks every TLS client for a certificate and verifies any it gets; these two services
//    then refuse a caller that presented none. One port serves all three services this way.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/server_context.h"

namespace fsdpd::server {

// Ordered: each role may do everything the ones below it may.
//   viewer:    read verbs (get, list, watch, logs, workers, profile tables, traces, export)
//   submitter: + submit, cancel (any job: jobs have no owner), start a profiling window
//   admin:     everything, including whatever is added later as admin-only
enum class Role { kViewer = 1, kSubmitter = 2, kAdmin = 3 };

const char* RoleName(Role role);
absl::StatusOr<Role> ParseRole(absl::string_view name);

using Sha256Digest = std::array<unsigned char, 32>;

Sha256Digest Sha256(absl::string_view data);
std::string ToHex(const Sha256Digest& digest);

struct TokenEntry {
  Sha256Digest digest{};
  Role role = Role::kViewer;
  std::string name;
};

// The tokens file: one `<sha256-hex> <role> <name>` per line; blank lines and lines starting
// with '#' are ignored. Errors name the file and line. `source` is used in messages only.
absl::StatusOr<std::vector<TokenEntry>> ParseTokens(absl::string_view content,
                                                    const std::string& source);
absl::StatusOr<std::vector<TokenEntry>> LoadTokensFile(const std::string& path);

// The line `fsdpd hash-token` prints for a token. The token must be non-empty, printable and
// free of whitespace, so it survives being stored in a file and sent as metadata.
absl::StatusOr<std::string> TokenLine(absl::string_view token, Role role, const std::string& name);

class Authenticator {
 public:
  // No tokens: every JobService call is allowed. require_client_certificate: the worker-facing
  // services refuse callers without a verified client certificate.
  Authenticator(std::vector<TokenEntry> tokens, bool require_client_certificate)
      : tokens_(std::move(tokens)), require_client_certificate_(require_client_certificate) {}

  bool tokens_enabled() const { return !tokens_.empty(); }

  // OK, UNAUTHENTICATED (no or unknown token) or PERMISSION_DENIED naming the role needed.
  grpc::Status Authorize(const grpc::ServerContextBase& context, Role needed,
                         const char* method) const;
  // OK or UNAUTHENTICATED when a client certificate is required and the caller has none.
  grpc::Status CheckClientCertificate(const grpc::ServerContextBase& context) const;

 private:
  std::vector<TokenEntry> tokens_;
  bool require_client_certificate_;
};

}  // namespace fsdpd::server
