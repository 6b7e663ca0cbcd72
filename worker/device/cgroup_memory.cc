#include "worker/device/cgroup_memory.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace fsdpd {
namespace {

// A v1 limit this large is the kernel's "no limit" (PAGE_COUNTER_MAX pages).
constexpr int64_t kUnlimitedV1 = int64_t{1} << 62;

std::optional<std::string> ReadText(const std::filesystem::path& path) {
  std::ifstream file(path);
  if (!file) return std::nullopt;
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

// The limit in one cgroup's file: a number of bytes, or nullopt for none or unreadable.
std::optional<int64_t> ReadLimit(const std::filesystem::path& file) {
  std::optional<std::string> text = ReadText(file);
  if (!text.has_value()) return std::nullopt;
  const std::string value(absl::StripAsciiWhitespace(*text));
  int64_t bytes = 0;
  if (value == "max" || !absl::SimpleAtoi(value, &bytes) || bytes <= 0 || bytes >= kUnlimitedV1) {
    return std::nullopt;
  }
  return bytes;
}

// "oom_kill N" in memory.events (v2) or memory.oom_control (v1).
std::optional<int64_t> ReadOomKills(const std::filesystem::path& file) {
  std::optional<std::string> text = ReadText(file);
  if (!text.has_value()) return std::nullopt;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    std::vector<absl::string_view> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
    int64_t count = 0;
    if (fields.size() == 2 && fields[0] == "oom_kill" && absl::SimpleAtoi(fields[1], &count)) {
      return count;
    }
  }
  return std::nullopt;
}

// The path without "." and ".." parts and without a trailing '/'.
std::string Normal(const std::filesystem::path& path) {
  std::string text = path.lexically_normal().string();
  while (text.size() > 1 && text.back() == '/') text.pop_back();
  return text;
}

}  // namespace

CgroupMemory ReadCgroupMemory(const CgroupRoots& roots) {
  CgroupMemory cgroup;
  std::optional<std::string> table = ReadText(roots.proc_self_cgroup);
  if (!table.has_value()) return cgroup;
  std::string v1_path;
  std::string v2_path;
  bool has_v1 = false;
  bool has_v2 = false;
  for (absl::string_view line : absl::StrSplit(*table, '\n', absl::SkipEmpty())) {
    // hierarchy-id:controllers:path (the path may itself hold ':').
    std::vector<std::string> fields = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (fields.size() != 3) continue;
    if (fields[0] == "0" && fields[1].empty()) {
      has_v2 = true;
      v2_path = fields[2];
    }
    for (absl::string_view controller : absl::StrSplit(fields[1], ',')) {
      if (controller == "memory") {
        has_v1 = true;
        v1_path = fields[2];
      }
    }
  }
  if (!has_v1 && !has_v2) return cgroup;
  cgroup.version = has_v1 ? 1 : 2;
  cgroup.path = has_v1 ? v1_path : v2_path;
  const std::filesystem::path root =
      has_v1 ? std::filesystem::path(roots.mount) / "memory" : std::filesystem::path(roots.mount);
  std::filesystem::path directory = root / std::filesystem::path(cgroup.path).relative_path();
  std::error_code error;
  if (!std::filesystem::is_directory(directory, error)) directory = root;
  const std::string top = Normal(root);
  std::string at = Normal(directory);
  if (at.compare(0, top.size(), top) != 0) at = top;  // a path that leaves the mount
  cgroup.directory = at;
  const char* limit_file = has_v1 ? "memory.limit_in_bytes" : "memory.max";
  // From the process's cgroup up to the mount's root: the tightest limit binds.
  while (true) {
    if (std::optional<int64_t> limit = ReadLimit(std::filesystem::path(at) / limit_file)) {
      cgroup.limit_bytes = cgroup.limit_bytes == 0 ? *limit : std::min(cgroup.limit_bytes, *limit);
    }
    if (at.size() <= top.size()) break;
    at = at.substr(0, at.rfind('/'));
  }
  cgroup.oom_kills = ReadOomKills(std::filesystem::path(cgroup.directory) /
                                  (has_v1 ? "memory.oom_control" : "memory.events"));
  return cgroup;
}

int64_t UsableHostMemory(int64_t physical, const CgroupMemory& cgroup) {
  if (cgroup.limit_bytes <= 0) return physical;
  if (physical <= 0) return cgroup.limit_bytes;
  return std::min(physical, cgroup.limit_bytes);
}

}  // namespace fsdpd
