// The binary format of one rank's checkpoint file (all integers little-endian):
//   "FSDPDCKP"  u32 version (1)  u32 flags (0)
//   i64 step  i32 rank  i32 world_size  i64 data_position
//   u64 rng_state bytes, the bytes
//   u64 buffer count, then per buffer: u64 name bytes, the name, u64 value count
//   the buffers' fp32 values, in table order
//   trailer: u32 CRC32C of everything before it, "FSDPDEND"
// The trailer lets rank 0 learn each file's checksum at commit time by reading 12 bytes
// instead of the whole file; loading still recomputes it over every byte.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/checkpoint/checkpoint.h"

namespace fsdpd {

// What the manifest records about a rank file, read cheaply from its header and trailer.
struct RankFileSummary {
  uint64_t size_bytes = 0;
  uint32_t crc32c = 0;  // of the whole file, trailer included
  int64_t step = 0;
  int rank = 0;
  int world_size = 0;
};

// Writes `state` durably to `path` (temp, fsync, rename, fsync dir). When `cancelled` is set and
// becomes true, stops between buffers with CANCELLED and leaves `path` untouched.
absl::Status WriteRankFile(const std::string& path, const RankCheckpoint& state,
                           const std::atomic<bool>* cancelled = nullptr);

// Reads the fixed header and the trailer of a written file; does not verify the data.
absl::StatusOr<RankFileSummary> SummarizeRankFile(const std::string& path);

// Parses a whole file already in memory, checking its structure and trailer checksum.
// Errors are DATA_LOSS with a reason (no prefix: the caller says which checkpoint).
absl::StatusOr<RankCheckpoint> ParseRankFile(std::string_view bytes);

}  // namespace fsdpd
