// libFuzzer target: a job spec as a user submits it (YAML → JobSpec → validation → estimates).
// Any input must give a spec or an error, never a crash, a hang or undefined behaviour.
#include <cstddef>
#include <cstdint>
#include <string>

#include "proto/spec/job_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<fsdpd::v1::JobSpec> spec = fsdpd::ParseJobSpecYaml(text);
  if (!spec.ok()) return 0;
  const std::vector<fsdpd::FieldError> errors = fsdpd::ValidateJobSpec(*spec);
  (void)fsdpd::FormatFieldErrors(errors);
  // The coordinator only estimates specs that validated.
  if (errors.empty()) {
    (void)fsdpd::ParameterCount(spec->model());
    (void)fsdpd::FlopsPerToken(*spec);
    (void)fsdpd::EstimateRankDeviceBytes(*spec);
    (void)fsdpd::ParseJobSpecYaml(fsdpd::JobSpecToYaml(*spec));
  }
  return 0;
}
