// The validator of the data section's validation fields (spec_validate.h): data.eval_path,
// data.eval_every and data.eval_batches.
#include "absl/strings/str_cat.h"
#include "proto/spec/spec_validate.h"

namespace fsdpd {

void ValidateEval(const v1::JobSpec& spec, FieldErrors& errors) {
  const v1::DataSpec& data = spec.data();
  errors.InRange("data.eval_every", data.eval_every(), 0, SpecLimits::kMaxSteps);
  errors.InRange("data.eval_batches", data.eval_batches(), 1, SpecLimits::kMaxEvalBatches);
  if (data.eval_every() <= 0) return;
  if (data.eval_path().empty()) {
    errors.Fail("data.eval_path", "is required when data.eval_every is set (the held-out data)");
  } else if (data.source() == "synthetic") {
    errors.Fail("data.eval_path",
                "is read like data.path, so it needs data.source tokens or text (got synthetic)");
  }
}

}  // namespace fsdpd
