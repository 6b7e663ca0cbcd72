// Environment knobs that take one of a few names (FSDPD_STREAM_PRIORITY, FSDPD_OPTIMIZER_STREAM)
// or a count (FSDPD_OPTIMIZER_SMS): a mistyped value is an error that names what is accepted,
// never silently the default.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
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

// The value of `name` as a count (a non-negative integer); 0 when unset or empty. Anything else
// is an error naming the variable and the value.
inline absl::StatusOr<int64_t> EnvCount(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return int64_t{0};
  int64_t count = 0;
  if (!absl::SimpleAtoi(value, &count) || count < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " must be a non-negative integer (or unset), got '", value, "'"));
  }
  return count;
}

}  // namespace fsdpd
