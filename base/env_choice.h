// Environment knobs that take one of a few names (FSDPD_STREAM_PRIORITY, FSDPD_OPTIMIZER_STREAM):
// a mistyped value is an error that names the accepted ones, never silently the default.
#pragma once

#include <cstdlib>
#include <initializer_list>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"

namespace fsdpd {

// The value of `name` when it is one of `accepted`; "" when unset or empty.
inline absl::StatusOr<std::string> EnvChoice(const char* name,
                                             std::initializer_list<absl::string_view> accepted) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::string();
  for (absl::string_view choice : accepted) {
    if (choice == value) return std::string(choice);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      name, " must be one of ", absl::StrJoin(accepted, ", "), " (or unset), got '", value, "'"));
}

}  // namespace fsdpd
