// A temporary directory for a test, created under the system's temp directory and removed with
// everything in it when the owner goes away. One helper for every test binary.
#pragma once

#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>

#include "gtest/gtest.h"

namespace fsdpd::testing {

class TempDir {
 public:
  // `prefix` names the directory (fsdpd-<prefix>-XXXXXX) so that a leftover one tells whose it
  // was. A directory that cannot be made fails the test; path() is then empty.
  explicit TempDir(const std::string& prefix = "test") {
    std::string pattern =
        (std::filesystem::temp_directory_path() / ("fsdpd-" + prefix + "-XXXXXX")).string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      ADD_FAILURE() << "cannot create a temporary directory from " << pattern << ": "
                    << std::strerror(errno);
      return;
    }
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // <path>/<name>; the file itself is not created.
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace fsdpd::testing
