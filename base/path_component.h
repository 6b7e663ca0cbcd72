// A name that arrives over the wire and becomes one component of a file-system path: a job's id
// or unique id naming its folder under the coordinator's artifact or profile store, or under a
// worker's checkpoint root. CheckPathComponent is the one rule for every such folder, so that no
// name can climb out of its root or name the root itself.
#pragma once

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace fsdpd {

// The longest component Linux file systems take (NAME_MAX).
inline constexpr size_t kMaxPathComponentBytes = 255;

// OK when `name` is one path component: not empty, not "." or "..", no '/' or '\\', no control
// characters (NUL included), at most kMaxPathComponentBytes. Otherwise INVALID_ARGUMENT naming
// `what` ("job uid") and the name, escaped and cut to 64 bytes.
inline absl::Status CheckPathComponent(absl::string_view what, absl::string_view name) {
  const char* reason = nullptr;
  if (name.empty()) {
    reason = "is empty";
  } else if (name == "." || name == "..") {
    reason = "names a folder itself, not one inside it";
  } else if (name.size() > kMaxPathComponentBytes) {
    reason = "is longer than a file name may be";
  } else {
    for (unsigned char c : name) {
      if (c == '/' || c == '\\') {
        reason = "holds a path separator";
        break;
      }
      if (c < 0x20 || c == 0x7f) {
        reason = "holds a control character";
        break;
      }
    }
  }
  if (reason == nullptr) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(what, " \"", absl::CHexEscape(name.substr(0, 64)),
                                                 "\" cannot name a folder: it ", reason));
}

}  // namespace fsdpd
