// A read of a rendezvous key, whole or as one of its value's equal parts: a rank's value can list
// one fixed-size record per peer, and each peer reads only its own. The one rule for parts, for
// the coordinator's rendezvous store (server/rendezvous_store.h) and the workers' stores
// (worker/comm/key_value_store.h) alike.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace fsdpd {

// The whole value (parts 0), or part `part`, counted from 0, of `parts` equal parts.
struct KeyPart {
  std::string key;
  int part = 0;
  int parts = 0;
};

// INVALID_ARGUMENT when the part asked does not exist.
inline absl::Status CheckKeyPart(const KeyPart& asked) {
  if (asked.parts < 0 || (asked.parts > 0 && (asked.part < 0 || asked.part >= asked.parts))) {
    return absl::InvalidArgumentError(absl::StrCat("rendezvous key \"", asked.key, "\": part ",
                                                   asked.part, " of ", asked.parts,
                                                   " does not exist"));
  }
  return absl::OkStatus();
}

// What `asked` reads of `value` (its key's value); FAILED_PRECONDITION for a value that does not
// split into the parts asked. `asked` must have passed CheckKeyPart.
inline absl::StatusOr<std::string> ValuePart(const KeyPart& asked, const std::string& value) {
  if (asked.parts == 0) return value;
  if (value.size() % asked.parts != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("rendezvous key \"", asked.key, "\" holds ", value.size(),
                     " bytes, which do not split into ", asked.parts, " equal parts"));
  }
  const size_t size = value.size() / asked.parts;
  return value.substr(size * asked.part, size);
}

}  // namespace fsdpd
