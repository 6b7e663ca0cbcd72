// key=value arguments of fsdpctl: `--set path=value` overrides of a job spec, applied through the
// spec's proto descriptors (fsdpctl resubmit), and `--label key=value` pairs (submit, resubmit,
// list). Every error names the argument and what is wrong with it.
//
// An override's path is the spec's YAML path, dotted: `train.lr`, `parallel.world_size`, `name`.
// Every segment but the last names a section; the last names a single value (a number, true or
// false, a string, or an enum's name such as `bf16`). A relative path field (data.path, ...) is
// made absolute against the current folder, as submit does against the spec file's folder. The
// result is checked by the coordinator's validator like any submitted spec.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fsdpd/v1/spec.pb.h"

namespace fsdpd::client {

// Applies one "path=value" override.
absl::Status ApplySpecOverride(const std::string& assignment, v1::JobSpec* spec);

// "key=value" arguments of `flag` as a map (a later key wins); an argument without '=' or with an
// empty key is an error naming it. The coordinator checks the label rules themselves.
absl::StatusOr<std::map<std::string, std::string>> ParseKeyValues(
    const std::vector<std::string>& arguments, const std::string& flag);

}  // namespace fsdpd::client
