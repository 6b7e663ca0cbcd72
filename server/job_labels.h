// Job labels (SubmitJobRequest.labels, ListJobsRequest.labels): free-form key=value pairs for
// grouping runs, validated like Kubernetes labels so they stay short, printable and selectable.
//
// Rules (each error names the label as its field, labels["key"]):
// - at most kMaxLabels labels;
// - a key is 1 to 63 characters of [A-Za-z0-9._/-], beginning and ending with a letter or digit;
// - a value is 0 to 63 characters of [A-Za-z0-9._-], beginning and ending with a letter or digit
//   when not empty.
// A selector (ListJobsRequest.labels) follows the same rules and matches a job that carries every
// one of its labels with the same value.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "fsdpd/v1/jobs.pb.h"
#include "proto/spec/job_spec.h"

namespace fsdpd::server {

inline constexpr int kMaxLabels = 32;
inline constexpr int kMaxLabelLength = 63;

using Labels = std::map<std::string, std::string>;

// Field errors of `labels`, each named `<field>["key"]`.
std::vector<FieldError> ValidateLabels(const Labels& labels, const std::string& field = "labels");

// Whether the job carries every label of `selector` with the same value (an empty selector
// matches every job).
bool MatchesLabels(const v1::Job& job, const Labels& selector);

Labels LabelsOf(const google::protobuf::Map<std::string, std::string>& labels);

}  // namespace fsdpd::server
