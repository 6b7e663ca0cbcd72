// ValidateJobSpec: every section validator of spec_validate.h, in the order of the spec.
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "proto/spec/job_spec.h"
#include "proto/spec/spec_validate.h"

namespace fsdpd {

std::vector<FieldError> ValidateJobSpec(const v1::JobSpec& spec) {
  FieldErrors errors;
  ValidateStringLengths(spec, errors);
  ValidateName(spec, errors);
  ValidateModel(spec.model(), errors);
  ValidateData(spec, errors);
  ValidateEval(spec, errors);
  ValidateTrain(spec.train(), errors);
  ValidateGradAccumulation(spec.train(), errors);
  ValidateParallel(spec, errors);
  ValidateCheckpoint(spec, errors);
  ValidatePaths(spec, errors);
  ValidateProfileAndPolicy(spec, errors);
  return errors.Take();
}

std::string FormatFieldErrors(const std::vector<FieldError>& errors) {
  std::vector<std::string> parts;
  for (const FieldError& error : errors) parts.push_back(error.field + ": " + error.message);
  return absl::StrJoin(parts, "; ");
}

}  // namespace fsdpd
