// A PEM file named by a TLS flag (--tls-cert, --tls-key, --tls-ca, --tls-client-ca): read whole
// at start-up by the coordinator (server/coordinator.cc) and by fsdpd-worker (worker/session.cc).
#pragma once

#include <fstream>
#include <sstream>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace fsdpd {

// The file's bytes. NOT_FOUND when it cannot be opened, INVALID_ARGUMENT when it holds no PEM
// block ("-----BEGIN"); both messages start with `flag` and name the file.
inline absl::StatusOr<std::string> ReadPemFile(absl::string_view flag, const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return absl::NotFoundError(absl::StrCat(flag, ": cannot open ", path));
  std::ostringstream content;
  content << file.rdbuf();
  if (content.str().find("-----BEGIN") == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": ", path, " is not a PEM file"));
  }
  return content.str();
}

}  // namespace fsdpd
