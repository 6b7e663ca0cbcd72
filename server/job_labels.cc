#include "server/job_labels.h"

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace fsdpd::server {
namespace {

bool Alphanumeric(char c) { return absl::ascii_isalnum(static_cast<unsigned char>(c)); }

// What is wrong with `text` as a key (`slash_allowed`) or value, or "".
std::string CheckLabelText(const std::string& text, bool slash_allowed, const char* what) {
  if (static_cast<int>(text.size()) > kMaxLabelLength) {
    return absl::StrCat("the ", what, " is ", text.size(), " characters long; at most ",
                        kMaxLabelLength, " are allowed");
  }
  for (char c : text) {
    if (Alphanumeric(c) || c == '.' || c == '_' || c == '-' || (slash_allowed && c == '/')) {
      continue;
    }
    return absl::StrCat("the ", what, " may hold only letters, digits and . _ -",
                        slash_allowed ? " /" : "", ", not '", absl::CHexEscape(std::string(1, c)),
                        "'");
  }
  if (!text.empty() && (!Alphanumeric(text.front()) || !Alphanumeric(text.back()))) {
    return absl::StrCat("the ", what, " must begin and end with a letter or digit");
  }
  return "";
}

// The key as it appears in a field name: quoted, escaped, and cut when very long.
std::string ShownKey(const std::string& key) {
  std::string shown = key.size() > 80 ? key.substr(0, 80) + "..." : key;
  return absl::StrCat("\"", absl::CHexEscape(shown), "\"");
}

}  // namespace

std::vector<FieldError> ValidateLabels(const Labels& labels, const std::string& field) {
  std::vector<FieldError> errors;
  if (static_cast<int>(labels.size()) > kMaxLabels) {
    errors.push_back(
        {field, absl::StrCat("at most ", kMaxLabels, " labels are allowed, got ", labels.size())});
  }
  for (const auto& [key, value] : labels) {
    const std::string name = absl::StrCat(field, "[", ShownKey(key), "]");
    if (key.empty()) {
      errors.push_back({name, "the key is empty; write key=value"});
      continue;
    }
    if (std::string why = CheckLabelText(key, true, "key"); !why.empty()) {
      errors.push_back({name, why});
    }
    if (std::string why = CheckLabelText(value, false, "value"); !why.empty()) {
      errors.push_back({name, why});
    }
  }
  return errors;
}

bool MatchesLabels(const v1::Job& job, const Labels& selector) {
  for (const auto& [key, value] : selector) {
    const auto found = job.labels().find(key);
    if (found == job.labels().end() || found->second != value) return false;
  }
  return true;
}

Labels LabelsOf(const google::protobuf::Map<std::string, std::string>& labels) {
  return Labels(labels.begin(), labels.end());
}

}  // namespace fsdpd::server
