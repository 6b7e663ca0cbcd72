// The shards of a sharded token dataset (`data: {source: tokens, path: <folder or manifest>}`):
// which files, in which order, and how many windows of seq_len + 1 tokens each holds.
//   - A folder: every `*.bin` file directly in it, sorted by name (bytewise).
//   - A manifest, a file whose name ends in `.manifest`: one shard a line, in the order listed,
//     relative to the manifest's folder unless absolute; blank lines and lines starting with `#`
//     are skipped. A line may add a tab and the shard's token count (fsdpd.data.write_shards
//     writes it), which the shard must then hold exactly: a truncated copy is caught at open.
// Every shard is resolved and confined to the worker's allowed roots like a spec path
// (worker/data/path_policy.h), must be a regular file of whole tokens and holds only ids below
// the vocab. Windows never cross a shard's end: a shard of n tokens holds (n − 1) / seq_len of
// them (none below seq_len + 1 tokens). Errors name the shard and where it was listed.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace fsdpd {

struct TokenShard {
  std::string path;    // resolved
  std::string listed;  // where it came from, for errors: "folder '...'" or "line 3 of '...'"
  uint64_t bytes = 0;  // as opened: a later read checks the file still has them
  uint64_t tokens = 0;
  uint64_t windows = 0;
  uint64_t first_window = 0;  // of the whole dataset's window numbering
};

struct TokenShardOptions {
  int token_bytes = 2;
  int64_t seq_len = 1;
  int64_t vocab = 1;
  std::vector<std::string> allowed_roots;  // empty: anywhere
  const std::atomic<bool>* cancelled = nullptr;
};

// True when `path` names a sharded dataset (a folder, or a file ending in `.manifest`) rather
// than one token file.
bool IsShardedTokenPath(const std::string& path);

// Lists, confines and checks every shard of the folder or manifest at `path` (resolved already).
absl::StatusOr<std::vector<TokenShard>> OpenTokenShards(const std::string& path,
                                                        const TokenShardOptions& options);

// Reads `count` tokens of `shard` from token `first` on, opening the file anew: a shard that
// vanished, shrank or grew since OpenTokenShards is an error naming it (its windows, and so the
// order a resumed job continues in, would no longer be the ones counted at open).
absl::Status ReadShardTokens(const TokenShard& shard, int token_bytes, uint64_t first,
                             uint64_t count, int32_t* out);

}  // namespace fsdpd
