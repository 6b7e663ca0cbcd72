#include "worker/data/token_shards.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"
#include "worker/data/path_policy.h"

namespace fsdpd {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "token files are read as little-endian");

constexpr char kManifestSuffix[] = ".manifest";
// Bytes read at a time when a shard's ids are checked at open.
constexpr size_t kScanChunkBytes = size_t{4} << 20;

struct Listed {
  std::string path;
  std::string listed;
  std::optional<uint64_t> tokens;  // from the manifest, when it gives them
};

// A file descriptor closed when it goes out of scope.
class Descriptor {
 public:
  explicit Descriptor(int fd) : fd_(fd) {}
  ~Descriptor() {
    if (fd_ >= 0) close(fd_);
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

std::string Named(const std::string& path, const std::string& listed) {
  return absl::StrCat("data shard '", path, "' (", listed, ")");
}

absl::StatusOr<std::vector<Listed>> ListFolder(const std::string& folder) {
  std::vector<Listed> shards;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(folder, error)) {
    const std::string name = entry.path().filename().string();
    if (!absl::EndsWith(name, ".bin")) continue;
    shards.push_back({entry.path().string(), absl::StrCat("in folder '", folder, "'"), {}});
  }
  if (error) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot list the data folder '", folder, "': ", error.message()));
  }
  std::sort(shards.begin(), shards.end(),
            [](const Listed& a, const Listed& b) { return a.path < b.path; });
  return shards;
}

absl::StatusOr<std::vector<Listed>> ListManifest(const std::string& manifest) {
  std::ifstream file(manifest);
  if (!file) {
    return absl::NotFoundError(absl::StrCat("cannot read the data manifest '", manifest, "'"));
  }
  const std::filesystem::path folder = std::filesystem::path(manifest).parent_path();
  std::vector<Listed> shards;
  std::string line;
  for (int number = 1; std::getline(file, line); ++number) {
    absl::string_view text = absl::StripSuffix(line, "\r");
    if (text.empty() || text[0] == '#') continue;
    Listed shard;
    shard.listed = absl::StrCat("line ", number, " of manifest '", manifest, "'");
    if (const size_t tab = text.find('\t'); tab != absl::string_view::npos) {
      const absl::string_view count = text.substr(tab + 1);
      uint64_t tokens = 0;
      const auto [end, failed] = std::from_chars(count.data(), count.data() + count.size(), tokens);
      if (failed != std::errc() || end != count.data() + count.size()) {
        return absl::InvalidArgumentError(absl::StrCat(
            shard.listed, ": the token count after the tab must be a whole number (got '", count,
            "')"));
      }
      shard.tokens = tokens;
      text = text.substr(0, tab);
    }
    if (text.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(shard.listed, " names no shard"));
    }
    const std::filesystem::path path(std::string{text});
    shard.path = path.is_absolute() ? path.string() : (folder / path).string();
    shards.push_back(std::move(shard));
  }
  return shards;
}

// Confines the shard, opens it and checks its size; returns the shard with its counts.
absl::StatusOr<TokenShard> OpenShard(const Listed& listed, const TokenShardOptions& options) {
  TokenShard shard;
  shard.listed = listed.listed;
  absl::StatusOr<std::string> resolved = ResolveConfinedPath(listed.path, options.allowed_roots);
  if (!resolved.ok()) {
    return absl::Status(resolved.status().code(),
                        absl::StrCat(shard.listed, ": ", resolved.status().message()));
  }
  shard.path = *resolved;
  if (absl::Status regular = CheckRegularFile(shard.path); !regular.ok()) {
    return absl::Status(regular.code(), absl::StrCat(shard.listed, ": ", regular.message()));
  }
  struct stat info {};
  if (stat(shard.path.c_str(), &info) != 0) {
    return absl::NotFoundError(
        absl::StrCat(Named(shard.path, shard.listed), " cannot be opened: ", std::strerror(errno)));
  }
  shard.bytes = static_cast<uint64_t>(info.st_size);
  const auto width = static_cast<uint64_t>(options.token_bytes);
  if (shard.bytes % width != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        Named(shard.path, shard.listed), " is ", shard.bytes,
        " bytes, not a multiple of data.token_bytes = ", width, ": truncated mid-token?"));
  }
  shard.tokens = shard.bytes / width;
  if (listed.tokens.has_value() && *listed.tokens != shard.tokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        Named(shard.path, shard.listed), " holds ", shard.tokens,
        " tokens where the manifest lists ", *listed.tokens, ": truncated or replaced?"));
  }
  const auto window_tokens = static_cast<uint64_t>(options.seq_len);
  shard.windows = shard.tokens > window_tokens ? (shard.tokens - 1) / window_tokens : 0;
  return shard;
}

// Every id of the shard below the vocab, read in chunks (cancellable between them).
absl::Status ScanShard(const TokenShard& shard, const TokenShardOptions& options) {
  const uint64_t chunk_tokens = kScanChunkBytes / static_cast<size_t>(options.token_bytes);
  std::vector<int32_t> ids;
  for (uint64_t first = 0; first < shard.tokens; first += chunk_tokens) {
    if (options.cancelled != nullptr && options.cancelled->load()) {
      return absl::CancelledError(
          absl::StrCat("cancelled while checking ", Named(shard.path, shard.listed)));
    }
    const uint64_t count = std::min(chunk_tokens, shard.tokens - first);
    ids.resize(count);
    FSDPD_RETURN_IF_ERROR(ReadShardTokens(shard, options.token_bytes, first, count, ids.data()));
    for (uint64_t index = 0; index < count; ++index) {
      const auto id = static_cast<uint32_t>(ids[index]);
      if (id >= static_cast<uint64_t>(options.vocab)) {
        return absl::InvalidArgumentError(
            absl::StrCat(Named(shard.path, shard.listed), ": token ", first + index,
                         " (byte offset ", (first + index) * options.token_bytes, ") has id ", id,
                         ", which is not below model.vocab = ", options.vocab));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

bool IsShardedTokenPath(const std::string& path) {
  std::error_code error;
  return absl::EndsWith(path, kManifestSuffix) || std::filesystem::is_directory(path, error);
}

absl::StatusOr<std::vector<TokenShard>> OpenTokenShards(const std::string& path,
                                                        const TokenShardOptions& options) {
  std::error_code error;
  const bool folder = std::filesystem::is_directory(path, error);
  FSDPD_ASSIGN_OR_RETURN(const std::vector<Listed> listed,
                         folder ? ListFolder(path) : ListManifest(path));
  if (listed.empty()) {
    return absl::InvalidArgumentError(
        folder ? absl::StrCat("the data folder '", path, "' holds no .bin shard")
               : absl::StrCat("the data manifest '", path, "' lists no shard"));
  }
  std::vector<TokenShard> shards;
  uint64_t windows = 0;
  for (const Listed& entry : listed) {
    FSDPD_ASSIGN_OR_RETURN(TokenShard shard, OpenShard(entry, options));
    FSDPD_RETURN_IF_ERROR(ScanShard(shard, options));
    shard.first_window = windows;
    windows += shard.windows;
    shards.push_back(std::move(shard));
  }
  if (windows == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("no shard of '", path,
                     "' holds a window of data.seq_len + 1 = ", options.seq_len + 1, " tokens"));
  }
  return shards;
}

absl::Status ReadShardTokens(const TokenShard& shard, int token_bytes, uint64_t first,
                             uint64_t count, int32_t* out) {
  const Descriptor file(open(shard.path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (file.get() < 0) {
    const int error_number = errno;
    return absl::Status(
        error_number == ENOENT ? absl::StatusCode::kNotFound : absl::StatusCode::kUnavailable,
        absl::StrCat(
            Named(shard.path, shard.listed),
            error_number == ENOENT ? " vanished after the job opened it" : " cannot be opened",
            ": ", std::strerror(error_number)));
  }
  struct stat info {};
  if (fstat(file.get(), &info) != 0 || !S_ISREG(info.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(Named(shard.path, shard.listed), " is no longer a regular file"));
  }
  if (static_cast<uint64_t>(info.st_size) != shard.bytes) {
    return absl::FailedPreconditionError(
        absl::StrCat(Named(shard.path, shard.listed), " is ", info.st_size,
                     " bytes now where it was ", shard.bytes, " when the job opened it: ",
                     static_cast<uint64_t>(info.st_size) < shard.bytes ? "truncated" : "rewritten",
                     " under the job, so its windows are no longer the ones counted"));
  }
  const auto width = static_cast<size_t>(token_bytes);
  std::vector<uint8_t> bytes(count * width);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t got = pread(file.get(), bytes.data() + done, bytes.size() - done,
                              static_cast<off_t>(first * width + done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          Named(shard.path, shard.listed), ": reading ", bytes.size(), " bytes at offset ",
          first * width, " failed", got < 0 ? absl::StrCat(": ", std::strerror(errno)) : "",
          got == 0 ? " (the file ended early: truncated?)" : ""));
    }
    done += static_cast<size_t>(got);
  }
  for (uint64_t index = 0; index < count; ++index) {
    if (width == 2) {
      uint16_t value;
      std::memcpy(&value, bytes.data() + index * 2, sizeof(value));
      out[index] = value;
    } else {
      uint32_t value;
      std::memcpy(&value, bytes.data() + index * 4, sizeof(value));
      out[index] = static_cast<int32_t>(value);
    }
  }
  return absl::OkStatus();
}

}  // namespace fsdpd
