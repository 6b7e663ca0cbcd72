// Who may call what. Two independent mechanisms:
//  - Bearer tokens for the JobService (fsdpctl): the coordinator keeps only SHA-256 digests of
//    the tokens, each with a role and a name, read from --tokens-file. Without a tokens file
//    authentication is off, which is the loopback-only default.
//  - Worker credentials for the WorkerService and RendezvousService: a bearer token with the
//    role `worker` from the same tokens file, or a client certificate verified against
//    --tls-client-ca (the server asks every TLS client for one and verifies any it gets). When
//    tokens or a client CA are configured, these two services answer nobody without one of
//    them. One port serves all three services this way. The credential's name (the token's
//    name, or the certificate's subject) is the worker's principal: worker ids and rendezvous
//    scopes are bound to it (worker_registry.h). docs/security.md has the threat model.
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

// The user roles are ordered: each may do everything the ones below it may.
//   viewer:    read verbs (get, list, watch, logs, workers, profile tables, traces, export)
//   submitter: + submit, cancel and profile their own jobs
//   admin:     everything, including other users' jobs
// worker is apart: it may call only the WorkerService and RendezvousService, and no user verb
// accepts it (it ranks below viewer).
enum class Role { kWorker = 0, kViewer = 1, kSubmitter = 2, kAdmin = 3 };

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

// Who called: the credential's name, and its role (kAdmin when authentication is off).
struct Caller {
  std::string principal;  // "token:<name>", "cert:<subject>", or "" when authentication is off
  Role role = Role::kAdmin;
};

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
  // As Authorize, and says who called (the job's owner, the actor of a state change).
  grpc::Status Identify(const grpc::ServerContextBase& context, Role needed, const char* method,
                        Caller* caller) const;
  // The worker-facing services. With neither tokens nor a client CA configured everyone passes
  // with the empty principal. Otherwise the caller needs a verified client certificate or a
  // token with the role `worker`: UNAUTHENTICATED without either, PERMISSION_DENIED for a user
  // token. *principal names the credential.
  grpc::Status AuthenticateWorker(const grpc::ServerContextBase& context,
                                  std::string* principal) const;
  bool worker_credentials_required() const {
    return !tokens_.empty() || require_client_certificate_;
  }

 private:
  // The entry of the bearer token the caller sent: UNAUTHENTICATED if there is none or it is
  // unknown.
  grpc::Status FindToken(const grpc::ServerContextBase& context, const TokenEntry** entry) const;

  std::vector<TokenEntry> tokens_;
  bool require_client_certificate_;
};

}  // namespace fsdpd::server
