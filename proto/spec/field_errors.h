// Collects the field errors of one spec check: each rule names its field ("model.dim") and says
// what is wrong in words a user can act on.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "proto/spec/job_spec.h"

namespace fsdpd {

class FieldErrors {
 public:
  void Fail(std::string field, std::string message) {
    errors_.push_back({std::move(field), std::move(message)});
  }

  // False (and an error) when value is outside [low, high].
  bool InRange(const std::string& field, int64_t value, int64_t low, int64_t high) {
    if (value >= low && value <= high) return true;
    Fail(field, absl::StrCat("must be between ", low, " and ", high, " (got ", value, ")"));
    return false;
  }

  bool empty() const { return errors_.empty(); }
  std::vector<FieldError> Take() { return std::move(errors_); }

 private:
  std::vector<FieldError> errors_;
};

}  // namespace fsdpd
