// Sharded checkpoints. Layout under a job's checkpoint directory:
//   step-00000010/rank-00000.bin   one file per rank: its flat shards and its state
//   step-00000010/MANIFEST.json    written last, by rank 0, after every rank's file is durable
//   LATEST                         (optional hint) the newest committed step
// A checkpoint counts only once its manifest exists; the manifest lists each rank file's size
// and CRC32C so a corrupt or truncated shard is detected at load, and loading then falls back
// to the previous complete checkpoint. Every file is written to a temp name, fsynced, renamed,
// and the directory fsynced.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace fsdpd {

struct ShardBuffer {
  std::string name;  // e.g. "unit.3.param", "unit.3.adam_m" (UnitBufferName)
  std::vector<float> values;
};

// The parts of a unit a rank file holds: the fp32 master slice and AdamW's two moments.
inline constexpr char kMasterPart[] = "param";
inline constexpr char kExpAvgPart[] = "adam_m";
inline constexpr char kExpAvgSqPart[] = "adam_v";

// The name of one unit's part in a rank file: "unit.<unit>.<part>".
std::string UnitBufferName(int unit, const std::string& part);

struct RankCheckpoint {
  int64_t step = 0;  // steps completed
  int rank = 0;
  int world_size = 1;
  std::string rng_state;      // opaque engine RNG state
  int64_t data_position = 0;  // next data step
  std::vector<ShardBuffer> buffers;
};

// Who wrote a checkpoint and for what, recorded in its manifest: a checkpoint is resumed only
// by the job that wrote it (its unique id) and only into the same shapes. Empty fields: not
// recorded (fsdpd-train, or a manifest from before identities).
struct CheckpointIdentity {
  std::string job_uid;
  int attempt = 0;
  // What makes a checkpoint loadable: model config, world size, dtypes, optimizer
  // (worker/trainer_checkpoint.h builds it), as "key=value" words.
  std::string fingerprint;
  // The world size of the run that wrote it (ReadCheckpointIdentity fills it from the manifest;
  // 0: not read).
  int world_size = 0;
};

// Writes this rank's file for `step` (durable on return). Does not commit. When `cancelled` is
// set and becomes true, stops between buffers with CANCELLED (WriteRankFile).
absl::Status WriteRankCheckpoint(const std::string& job_dir, const RankCheckpoint& state,
                                 const std::atomic<bool>* cancelled = nullptr);

// The path of `rank`'s file of `step` under job_dir.
std::string RankCheckpointPath(const std::string& job_dir, int64_t step, int rank);

// The lowest rank whose file of `step` is absent under job_dir; -1 when every rank's is there.
int FirstMissingRankFile(const std::string& job_dir, int64_t step, int world_size);

// Rank 0, after all ranks returned from WriteRankCheckpoint (a barrier): writes the manifest
// for `step`, then deletes the oldest complete checkpoints beyond `keep` and any incomplete
// step directories older than `step`. A rank's file that is absent although its rank wrote it
// means that the ranks do not share the checkpoint root: FAILED_PRECONDITION naming the file
// and the remedy (CheckpointRootNotShared).
absl::Status CommitCheckpoint(const std::string& job_dir, int64_t step, int world_size, int keep,
                              const CheckpointIdentity& identity = {});

// The identity recorded in the manifest of committed `step` (empty fields where it has none),
// with the manifest's world size.
absl::StatusOr<CheckpointIdentity> ReadCheckpointIdentity(const std::string& job_dir, int64_t step);

// The bytes of committed `step` on disk: every rank file and the manifest.
absl::StatusOr<int64_t> CheckpointSizeBytes(const std::string& job_dir, int64_t step);

// Steps with a manifest, newest first.
absl::StatusOr<std::vector<int64_t>> ListCommittedSteps(const std::string& job_dir);

// Ranks verify independently, so one rank's corrupt shard can make ranks pick different
// steps: a multi-rank caller agrees on a step (as the trainer does with an all-reduce) and
// uses LoadRankCheckpoint, or checks that every rank returned the same step.
// Loads this rank's state from the newest committed checkpoint whose manifest and this
// rank's file verify (size, CRC, world size); skips corrupt ones with a reason in
// `skipped` (if given). std::nullopt when there is none.
absl::StatusOr<std::optional<RankCheckpoint>> LoadLatestRankCheckpoint(
    const std::string& job_dir, int rank, int world_size, std::vector<std::string>* skipped);

// Loads one specific committed step for this rank.
absl::StatusOr<RankCheckpoint> LoadRankCheckpoint(const std::string& job_dir, int64_t step,
                                                  int rank, int world_size);

}  // namespace fsdpd
