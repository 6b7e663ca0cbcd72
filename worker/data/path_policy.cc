#include "worker/data/path_policy.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "proto/spec/spec_path_fields.h"

namespace fsdpd {
namespace {

absl::StatusOr<std::filesystem::path> Canonicalize(const std::string& path) {
  std::error_code error;
  std::filesystem::path absolute = std::filesystem::absolute(path, error);
  if (error) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resolve path '", path, "': ", error.message()));
  }
  std::filesystem::path canonical = std::filesystem::weakly_canonical(absolute, error);
  if (error) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resolve path '", path, "': ", error.message()));
  }
  return canonical.lexically_normal();
}

// Component-wise, so that "/data2" is not taken to be inside "/data".
bool IsWithin(const std::filesystem::path& path, const std::filesystem::path& root) {
  auto path_part = path.begin();
  for (auto root_part = root.begin(); root_part != root.end(); ++root_part) {
    // A trailing separator shows up as an empty last component; it matches anything.
    if (root_part->empty()) continue;
    if (path_part == path.end() || *path_part != *root_part) return false;
    ++path_part;
  }
  return true;
}

const char* FileKind(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISDIR(mode)) return "a directory";
  return "not a file";
}

// data.path and data.eval_path may name a folder of token shards (worker/data/token_shards.h);
// the loader confines and checks each shard in it. Every other path field names a file.
bool MayBeFolder(const SpecPathField& field, const std::string& path) {
  std::error_code error;
  return (field.name() == "data.path" || field.name() == "data.eval_path") &&
         std::filesystem::is_directory(path, error);
}

}  // namespace

absl::Status CheckRegularFile(const std::string& path) {
  struct stat info {};
  // stat(2) follows symlinks and never opens the file.
  if (stat(path.c_str(), &info) != 0) {
    const int error_number = errno;
    if (error_number == ENOENT || error_number == ENOTDIR) return absl::OkStatus();
    return absl::PermissionDeniedError(
        absl::StrCat("cannot inspect path '", path, "': ", std::strerror(error_number)));
  }
  if (S_ISREG(info.st_mode)) return absl::OkStatus();
  std::error_code error;
  const std::filesystem::path target = std::filesystem::canonical(path, error);
  const std::string resolves = error || target.string() == path
                                   ? ""
                                   : absl::StrCat(" resolves to '", target.string(), "', which");
  return absl::InvalidArgumentError(absl::StrCat("path '", path, "'", resolves,
                                                 " is not a regular file (it is ",
                                                 FileKind(info.st_mode), ")"));
}

absl::StatusOr<std::string> ResolveConfinedPath(const std::string& path,
                                                const std::vector<std::string>& allowed_roots) {
  if (path.empty()) return absl::InvalidArgumentError("empty path");
  auto resolved = Canonicalize(path);
  if (!resolved.ok()) return resolved.status();
  if (allowed_roots.empty()) return resolved->string();
  std::vector<std::string> canonical_roots;
  for (const std::string& root : allowed_roots) {
    if (root.empty()) continue;
    auto canonical_root = Canonicalize(root);
    if (!canonical_root.ok()) return canonical_root.status();
    if (IsWithin(*resolved, *canonical_root)) return resolved->string();
    canonical_roots.push_back(canonical_root->string());
  }
  return absl::PermissionDeniedError(
      absl::StrCat("path '", path, "' resolves to '", resolved->string(),
                   "', which is outside the allowed roots: ",
                   canonical_roots.empty() ? "(none)" : absl::StrJoin(canonical_roots, ", ")));
}

absl::StatusOr<v1::JobSpec> ResolveSpecPaths(const v1::JobSpec& spec,
                                             const std::vector<std::string>& allowed_roots) {
  v1::JobSpec resolved_spec = spec;
  for (const SpecPathField& field : SpecPathFields()) {
    const std::string path = field.Get(spec);
    if (path.empty()) continue;
    absl::StatusOr<std::string> resolved = ResolveConfinedPath(path, allowed_roots);
    // The path as the spec gave it is named, and the check follows its symlinks itself.
    absl::Status status = !resolved.ok()             ? resolved.status()
                          : MayBeFolder(field, path) ? absl::OkStatus()
                                                     : CheckRegularFile(path);
    if (!status.ok()) {
      return absl::Status(status.code(), absl::StrCat(field.name(), ": ", status.message()));
    }
    field.Set(&resolved_spec, *resolved);
  }
  return resolved_spec;
}

absl::StatusOr<std::string> CreateConfinedDirectory(const std::string& path,
                                                    const std::vector<std::string>& allowed_roots) {
  absl::StatusOr<std::string> resolved = ResolveConfinedPath(path, allowed_roots);
  if (!resolved.ok()) {
    return absl::Status(resolved.status().code(),
                        absl::StrCat("checkpoint directory: ", resolved.status().message()));
  }
  std::error_code error;
  std::filesystem::create_directories(*resolved, error);
  if (error) {
    return absl::UnavailableError(
        absl::StrCat("cannot create the checkpoint directory ", *resolved, ": ", error.message(),
                     " (the worker's checkpoint root is at fault, not the job)"));
  }
  return resolved;
}

}  // namespace fsdpd
