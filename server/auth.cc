#include "server/auth.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <cctype>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace fsdpd::server {
namespace {

constexpr absl::string_view kBearerPrefix = "Bearer ";
// Bounds what a client can make the server hash; real tokens are a few dozen characters.
constexpr size_t kMaxTokenBytes = 4096;
constexpr size_t kMaxTokensFileBytes = 1 << 20;

bool ParseHexDigest(absl::string_view hex, Sha256Digest* digest) {
  if (hex.size() != 2 * digest->size()) return false;
  for (size_t i = 0; i < digest->size(); ++i) {
    int value = 0;
    for (char c : hex.substr(2 * i, 2)) {
      const char lower = absl::ascii_tolower(static_cast<unsigned char>(c));
      int nibble = 0;
      if (lower >= '0' && lower <= '9') {
        nibble = lower - '0';
      } else if (lower >= 'a' && lower <= 'f') {
        nibble = lower - 'a' + 10;
      } else {
        return false;
      }
      value = value * 16 + nibble;
    }
    (*digest)[i] = static_cast<unsigned char>(value);
  }
  return true;
}

bool IsTokenText(absl::string_view token) {
  if (token.empty() || token.size() > kMaxTokenBytes) return false;
  for (char c : token) {
    if (!absl::ascii_isgraph(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

}  // namespace

const char* RoleName(Role role) {
  switch (role) {
    case Role::kWorker:
      return "worker";
    case Role::kViewer:
      return "viewer";
    case Role::kSubmitter:
      return "submitter";
    case Role::kAdmin:
      return "admin";
  }
  return "unknown";
}

absl::StatusOr<Role> ParseRole(absl::string_view name) {
  if (name == "worker") return Role::kWorker;
  if (name == "viewer") return Role::kViewer;
  if (name == "submitter") return Role::kSubmitter;
  if (name == "admin") return Role::kAdmin;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown role \"", name, "\" (known: worker, viewer, submitter, admin)"));
}

Sha256Digest Sha256(absl::string_view data) {
  Sha256Digest digest{};
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), digest.data());
  return digest;
}

std::string ToHex(const Sha256Digest& digest) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * digest.size());
  for (unsigned char byte : digest) {
    hex.push_back(kDigits[byte >> 4]);
    hex.push_back(kDigits[byte & 15]);
  }
  return hex;
}

absl::StatusOr<std::vector<TokenEntry>> ParseTokens(absl::string_view content,
                                                    const std::string& source) {
  std::vector<TokenEntry> entries;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(content, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line.front() == '#') continue;
    std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    const std::string where = absl::StrCat(source, ":", line_number, ": ");
    if (fields.size() != 3) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, "expected `<sha256-hex> <role> <name>` (make lines with `fsdpd hash-token`)"));
    }
    TokenEntry entry;
    if (!ParseHexDigest(fields[0], &entry.digest)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "the first field must be 64 hex digits (a SHA-256 of the token)"));
    }
    absl::StatusOr<Role> role = ParseRole(fields[1]);
    if (!role.ok()) return absl::InvalidArgumentError(absl::StrCat(where, role.status().message()));
    entry.role = *role;
    entry.name = std::string(fields[2]);
    for (const TokenEntry& other : entries) {
      if (CRYPTO_memcmp(other.digest.data(), entry.digest.data(), entry.digest.size()) == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, "the same token is listed twice (", other.name, ")"));
      }
    }
    entries.push_back(std::move(entry));
  }
  return entries;
}

absl::StatusOr<std::vector<TokenEntry>> LoadTokensFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return absl::NotFoundError(absl::StrCat("tokens-file: cannot open ", path));
  std::string content(kMaxTokensFileBytes + 1, '\0');
  file.read(content.data(), static_cast<std::streamsize>(content.size()));
  content.resize(static_cast<size_t>(file.gcount()));
  if (content.size() > kMaxTokensFileBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokens-file: ", path, " is larger than ", kMaxTokensFileBytes, " bytes"));
  }
  absl::StatusOr<std::vector<TokenEntry>> entries = ParseTokens(content, path);
  if (!entries.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("tokens-file: ", entries.status().message()));
  }
  if (entries->empty()) {
    // An empty file would silently turn authentication off.
    return absl::InvalidArgumentError(absl::StrCat("tokens-file: ", path, " lists no tokens"));
  }
  return entries;
}

absl::StatusOr<std::string> TokenLine(absl::string_view token, Role role, const std::string& name) {
  if (!IsTokenText(token)) {
    return absl::InvalidArgumentError(absl::StrCat("a token must be 1..", kMaxTokenBytes,
                                                   " printable characters without whitespace"));
  }
  if (name.empty() || !IsTokenText(name)) {
    return absl::InvalidArgumentError("the name must be non-empty and without whitespace");
  }
  return absl::StrCat(ToHex(Sha256(token)), " ", RoleName(role), " ", name);
}

grpc::Status Authenticator::FindToken(const grpc::ServerContextBase& context,
                                      const TokenEntry** entry) const {
  const auto& metadata = context.client_metadata();
  auto found = metadata.find("authorization");
  if (found == metadata.end()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "a bearer token is required (fsdpctl --token-file or FSDPD_TOKEN_FILE)");
  }
  absl::string_view value(found->second.data(), found->second.size());
  if (!absl::ConsumePrefix(&value, kBearerPrefix) || !IsTokenText(value)) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "the authorization metadata must be `Bearer <token>`");
  }
  const Sha256Digest digest = Sha256(value);
  // Every entry is compared in constant time and the loop does not stop early, so timing says
  // nothing about which digest came close.
  const TokenEntry* match = nullptr;
  for (const TokenEntry& candidate : tokens_) {
    if (CRYPTO_memcmp(candidate.digest.data(), digest.data(), digest.size()) == 0) {
      match = &candidate;
    }
  }
  if (match == nullptr) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "the bearer token is not valid");
  }
  *entry = match;
  return grpc::Status::OK;
}

grpc::Status Authenticator::Authorize(const grpc::ServerContextBase& context, Role needed,
                                      const char* method) const {
  Caller caller;
  return Identify(context, needed, method, &caller);
}

namespace {

// The subject of the verified client certificate, or "" when the caller sent none.
std::string CertificateSubject(const grpc::ServerContextBase& context) {
  std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth == nullptr || auth->FindPropertyValues("x509_pem_cert").empty()) return "";
  for (const char* property : {"x509_subject", "x509_common_name"}) {
    std::vector<grpc::string_ref> values = auth->FindPropertyValues(property);
    if (!values.empty() && values.front().size() > 0) {
      return std::string(values.front().data(), values.front().size());
    }
  }
  return "(no subject)";
}

}  // namespace

grpc::Status Authenticator::Identify(const grpc::ServerContextBase& context, Role needed,
                                     const char* method, Caller* caller) const {
  *caller = Caller{};
  if (tokens_.empty()) {
    // Without tokens every caller may do everything; a verified client certificate still
    // names who it is (the owner of what it submits).
    if (require_client_certificate_) {
      const std::string subject = CertificateSubject(context);
      if (!subject.empty()) caller->principal = absl::StrCat("cert:", subject);
    }
    return grpc::Status::OK;
  }
  const TokenEntry* match = nullptr;
  if (grpc::Status found = FindToken(context, &match); !found.ok()) return found;
  if (static_cast<int>(match->role) < static_cast<int>(needed)) {
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        absl::StrCat(method, " needs the role ", RoleName(needed), "; token \"",
                                     match->name, "\" has the role ", RoleName(match->role)));
  }
  caller->principal = absl::StrCat("token:", match->name);
  caller->role = match->role;
  return grpc::Status::OK;
}

grpc::Status Authenticator::AuthenticateWorker(const grpc::ServerContextBase& context,
                                               std::string* principal) const {
  principal->clear();
  if (!worker_credentials_required()) return grpc::Status::OK;
  // The handshake already verified any certificate the client sent (REQUEST_..._AND_VERIFY);
  // what is left to check is that one was sent at all.
  if (require_client_certificate_) {
    std::string subject = CertificateSubject(context);
    if (!subject.empty()) {
      *principal = absl::StrCat("cert:", subject);
      return grpc::Status::OK;
    }
  }
  const bool has_token = context.client_metadata().count("authorization") > 0;
  if (tokens_.empty() || !has_token) {
    return grpc::Status(
        grpc::StatusCode::UNAUTHENTICATED,
        tokens_.empty()
            ? "workers must present a client certificate signed by the coordinator's "
              "--tls-client-ca (fsdpd-worker --tls-cert/--tls-key)"
            : "workers must present a worker token (fsdpd-worker --token-file) or a client "
              "certificate signed by the coordinator's --tls-client-ca");
  }
  const TokenEntry* match = nullptr;
  if (grpc::Status found = FindToken(context, &match); !found.ok()) return found;
  if (match->role != Role::kWorker) {
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        absl::StrCat("the worker services need a token with the role worker; "
                                     "token \"",
                                     match->name, "\" has the role ", RoleName(match->role)));
  }
  *principal = absl::StrCat("token:", match->name);
  return grpc::Status::OK;
}

}  // namespace fsdpd::server
