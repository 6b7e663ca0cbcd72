// The syntax of the path fields of a job spec (SpecPathFields): what every host would refuse,
// checked once where the spec enters. Existence and the worker's allowed roots are checked by the
// worker (worker/data/path_policy.h).
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "proto/spec/spec_path_fields.h"
#include "proto/spec/spec_validate.h"

namespace fsdpd {
namespace {

// System folders no training data or weights live in; reading them is an attack.
constexpr absl::string_view kSystemFolders[] = {"/etc", "/proc", "/sys", "/dev"};

bool HasControlCharacter(const std::string& path) {
  for (unsigned char c : path) {
    if (c < 0x20 || c == 0x7f) return true;
  }
  return false;
}

void ValidatePathSyntax(const std::string& field, const std::string& path, FieldErrors& errors) {
  if (path.size() > SpecLimits::kMaxPathLength) return;  // ValidateStringLengths says so
  if (HasControlCharacter(path)) {
    errors.Fail(field, "must not contain control characters");
    return;
  }
  if (path.front() != '/') {
    errors.Fail(field,
                "must be an absolute path (fsdpctl resolves a relative one against the "
                "spec file's folder; got '" +
                    path + "')");
    return;
  }
  for (absl::string_view part : absl::StrSplit(path.substr(1), '/')) {
    if (part.empty() || part == "." || part == "..") {
      errors.Fail(field, "must be a normalised path: no empty, '.' or '..' components (got '" +
                             path + "')");
      return;
    }
  }
  for (absl::string_view folder : kSystemFolders) {
    if (path == folder || absl::StartsWith(path, absl::StrCat(folder, "/"))) {
      errors.Fail(field, absl::StrCat("must not point into the system folder ", folder));
      return;
    }
  }
}

}  // namespace

void ValidatePaths(const v1::JobSpec& spec, FieldErrors& errors) {
  for (const SpecPathField& field : SpecPathFields()) {
    const std::string path = field.Get(spec);
    if (!path.empty()) ValidatePathSyntax(field.name(), path, errors);
  }
}

}  // namespace fsdpd
