#include "worker/trainer_checkpoint.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "worker/checkpoint/checkpoint.h"
#include "worker/checkpoint/root_probe.h"
#include "worker/trainer_support.h"

namespace fsdpd {
namespace {

// What each unit contributes to a rank's checkpoint file, in a fixed order, as fp32 values. The
// master goes through FsdpState, which knows its layout (fp32 or split in halves); the file is
// the same either way.
struct ShardPart {
  const char* suffix;
  std::unique_ptr<Buffer> UnitShard::*buffer;  // null: the master
};
constexpr ShardPart kShardParts[] = {
    {kMasterPart, nullptr},
    {kExpAvgPart, &UnitShard::exp_avg},
    {kExpAvgSqPart, &UnitShard::exp_avg_sq},
};

std::string BufferName(int unit, const char* suffix) { return UnitBufferName(unit, suffix); }

// A file that verified can still belong to another model: check it holds exactly our shards.
absl::Status CheckMatchesState(const RankCheckpoint& checkpoint, FsdpState& state) {
  const size_t expected = static_cast<size_t>(state.num_units()) * std::size(kShardParts);
  if (checkpoint.buffers.size() != expected) {
    return absl::FailedPreconditionError(
        absl::StrCat("holds ", checkpoint.buffers.size(), " buffers, this model needs ", expected));
  }
  size_t index = 0;
  for (int unit = 0; unit < state.num_units(); ++unit) {
    for (const ShardPart& part : kShardParts) {
      const ShardBuffer& buffer = checkpoint.buffers[index++];
      const std::string name = BufferName(unit, part.suffix);
      if (buffer.name != name ||
          static_cast<int64_t>(buffer.values.size()) != state.shard(unit).layout.shard_numel) {
        return absl::FailedPreconditionError(absl::StrCat(
            "buffer ", buffer.name, " (", buffer.values.size(), " values) where ", name, " (",
            state.shard(unit).layout.shard_numel, " values) was expected"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ApplyCheckpoint(const RankCheckpoint& checkpoint, FsdpState& state, Backend& backend) {
  size_t index = 0;
  for (int unit = 0; unit < state.num_units(); ++unit) {
    UnitShard& shard = state.shard(unit);
    for (const ShardPart& part : kShardParts) {
      const float* values = checkpoint.buffers[index++].values.data();
      if (part.buffer == nullptr) {
        FSDPD_RETURN_IF_ERROR(state.CopyMasterShardFromHost(unit, values));
        continue;
      }
      const Tensor device = (shard.*(part.buffer))->View(DType::kF32, {shard.layout.shard_numel});
      FSDPD_RETURN_IF_ERROR(backend.CopyToDevice(values, device, backend.compute_stream()));
    }
  }
  return absl::OkStatus();
}

// The words of `found` that `expected` does not have, as "key=found (this job: key=expected)".
std::string FingerprintDifference(const std::string& found, const std::string& expected) {
  std::vector<std::string> differences;
  const std::vector<std::string> ours = absl::StrSplit(expected, ' ', absl::SkipEmpty());
  for (absl::string_view word : absl::StrSplit(found, ' ', absl::SkipEmpty())) {
    if (std::find(ours.begin(), ours.end(), word) != ours.end()) continue;
    const std::string key(word.substr(0, word.find('=')));
    std::string mine = "absent";
    for (const std::string& candidate : ours) {
      if (candidate.rfind(key + "=", 0) == 0) mine = candidate;
    }
    differences.push_back(absl::StrCat(word, " (this job: ", mine, ")"));
  }
  if (differences.empty()) return absl::StrCat("\"", found, "\" vs this job's \"", expected, "\"");
  return absl::StrJoin(differences, ", ");
}

}  // namespace

CheckpointIdentity CheckpointIdentityFor(const v1::JobSpec& spec, const std::string& job_uid,
                                         int attempt, int world_size) {
  const v1::ModelSpec& model = spec.model();
  const v1::TrainSpec& train = spec.train();
  CheckpointIdentity identity;
  identity.job_uid = job_uid;
  identity.attempt = attempt;
  identity.fingerprint = absl::StrCat(
      "vocab=", model.vocab(), " dim=", model.dim(), " layers=", model.layers(),
      " heads=", model.heads(), " ffn_mult=", model.ffn_mult(), " causal=", model.causal(),
      " final_norm=", model.final_norm(), " norm_eps=", model.norm_eps(),
      " world_size=", world_size, " param_dtype=", spec.parallel().param_dtype(),
      " reduce_dtype=", spec.parallel().reduce_dtype(), " master_dtype=fp32 optimizer=adamw",
      " beta1=", train.beta1(), " beta2=", train.beta2(), " eps=", train.eps(),
      " weight_decay=", train.weight_decay());
  return identity;
}

absl::Status CheckResumable(const CheckpointIdentity& found, const CheckpointIdentity& expected,
                            const std::string& job_dir, int64_t step) {
  const std::string where = absl::StrCat("the checkpoint of step ", step, " in ", job_dir);
  const std::string advice =
      "; refusing to resume from it (move it away, or start from its weights with "
      "checkpoint.init_from)";
  if (!expected.job_uid.empty() && found.job_uid != expected.job_uid) {
    return absl::FailedPreconditionError(absl::StrCat(
        where, " belongs to ",
        found.job_uid.empty() ? "no recorded job" : absl::StrCat("job ", found.job_uid),
        ", not to this job (", expected.job_uid, ")", advice));
  }
  if (!found.fingerprint.empty() && found.fingerprint != expected.fingerprint) {
    return absl::FailedPreconditionError(
        absl::StrCat(where, " was written for a different setup: ",
                     FingerprintDifference(found.fingerprint, expected.fingerprint), advice));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ResumeFromCheckpoint(const std::string& job_dir,
                                             const CheckpointIdentity& identity, FsdpState& state,
                                             Communicator& communicator, Backend& backend,
                                             const EngineLog& log) {
  const int rank = communicator.rank();
  const int world_size = communicator.world_size();
  std::vector<int64_t> steps;
  log("info", absl::StrCat("looking for a checkpoint to resume in ", job_dir));
  absl::StatusOr<std::vector<int64_t>> listed = ListCommittedSteps(job_dir);
  if (listed.ok()) {
    steps = *listed;
  } else {
    log("warning", absl::StrCat("cannot list checkpoints in ", job_dir, ": ",
                                listed.status().message(), "; starting from scratch"));
  }
  // Every rank walks its list newest first in lockstep; each round agrees on one step through
  // an all-reduce(min) of [this rank verified it, step, −step].
  for (size_t round = 0;; ++round) {
    const int64_t step = round < steps.size() ? steps[round] : -1;
    if (step > std::numeric_limits<int32_t>::max()) {
      return absl::OutOfRangeError(absl::StrCat("checkpoint step ", step, " is too large"));
    }
    std::optional<RankCheckpoint> loaded;
    std::string reason;
    if (step >= 0) {
      // Every rank reads the same manifest, so all refuse together.
      absl::StatusOr<CheckpointIdentity> found = ReadCheckpointIdentity(job_dir, step);
      if (found.ok()) FSDPD_RETURN_IF_ERROR(CheckResumable(*found, identity, job_dir, step));
      absl::StatusOr<RankCheckpoint> checkpoint =
          LoadRankCheckpoint(job_dir, step, rank, world_size);
      absl::Status usable =
          checkpoint.ok() ? CheckMatchesState(*checkpoint, state) : checkpoint.status();
      if (usable.ok()) {
        loaded = std::move(*checkpoint);
      } else {
        reason = std::string(usable.message());
      }
    }
    std::vector<int32_t> agreement = {loaded.has_value() ? 1 : 0, static_cast<int32_t>(step),
                                      static_cast<int32_t>(-step)};
    FSDPD_RETURN_IF_ERROR(AllReduceHostInts(communicator, backend, &agreement, ReduceOp::kMin));
    const int64_t lowest = agreement[1];
    const int64_t highest = -static_cast<int64_t>(agreement[2]);
    if (lowest != highest) {
      // Every rank lists the same directory when the root is shared, so their lists agree; a
      // rank that lists no checkpoint where another lists one (lowest −1) sees another root.
      return CheckpointRootNotShared(absl::StrCat(
          "ranks see different checkpoints in ", job_dir, ": the checkpoint of step ", highest,
          " is committed where some ranks look, ",
          lowest < 0 ? "while other ranks find none" : absl::StrCat("others find step ", lowest)));
    }
    if (lowest < 0) {
      if (round > 0) {
        log("warning", "no checkpoint verifies on every rank; starting from scratch");
      } else if (identity.attempt > 1) {
        // A retry starts over only when no attempt committed a checkpoint, or when it runs on
        // a checkpoint root other than the one they went to: either way, say so.
        log("warning",
            absl::StrCat("attempt ", identity.attempt, " finds no checkpoint in ", job_dir,
                         "; starting from step 0 (if an earlier attempt "
                         "committed one, it is on another checkpoint root)"));
      }
      return 0;
    }
    if (agreement[0] == 1) {
      FSDPD_RETURN_IF_ERROR(ApplyCheckpoint(*loaded, state, backend));
      log("info", absl::StrCat("resumed from the checkpoint of step ", step));
      return step;
    }
    if (!reason.empty()) {
      log("warning",
          absl::StrCat("rank ", rank, ": skipping the checkpoint of step ", step, ": ", reason));
    } else {
      log("warning", absl::StrCat("skipping the checkpoint of step ", step,
                                  ": it does not verify on another rank"));
    }
  }
}

absl::Status SaveCheckpoint(const std::string& job_dir, const CheckpointIdentity& identity,
                            int64_t step, int keep, FsdpState& state, Communicator& communicator,
                            Backend& backend, const std::atomic<bool>* cancelled) {
  RankCheckpoint checkpoint;
  checkpoint.step = step;
  checkpoint.rank = communicator.rank();
  checkpoint.world_size = communicator.world_size();
  checkpoint.data_position = step;
  absl::Status written;
  for (int unit = 0; unit < state.num_units() && written.ok(); ++unit) {
    UnitShard& shard = state.shard(unit);
    for (const ShardPart& part : kShardParts) {
      ShardBuffer buffer;
      buffer.name = BufferName(unit, part.suffix);
      buffer.values.resize(static_cast<size_t>(shard.layout.shard_numel));
      written = part.buffer == nullptr
                    ? state.CopyMasterShardToHost(unit, buffer.values.data())
                    : backend.CopyToHost(
                          (shard.*(part.buffer))->View(DType::kF32, {shard.layout.shard_numel}),
                          buffer.values.data(), backend.compute_stream());
      if (!written.ok()) break;
      checkpoint.buffers.push_back(std::move(buffer));
    }
  }
  if (written.ok()) written = WriteRankCheckpoint(job_dir, checkpoint, cancelled);
  // Doubles as the barrier before the commit: nobody commits until every file is durable.
  std::vector<int32_t> all_written = {written.ok() ? 1 : 0};
  FSDPD_RETURN_IF_ERROR(AllReduceHostInts(communicator, backend, &all_written, ReduceOp::kMin));
  if (!written.ok()) {
    return absl::InternalError(absl::StrCat("writing the checkpoint of step ", step,
                                            " failed on rank ", communicator.rank(), ": ",
                                            written.message()));
  }
  if (all_written[0] == 0) {
    return absl::InternalError(absl::StrCat("writing the checkpoint of step ", step,
                                            " failed on another rank; not committed"));
  }
  absl::Status committed;
  // Rank 0 also says which rank's file it could not find (else the largest int, which the
  // minimum ignores), so that every rank fails with the same message, naming that file.
  int32_t missing = std::numeric_limits<int32_t>::max();
  if (communicator.rank() == 0) {
    committed = CommitCheckpoint(job_dir, step, communicator.world_size(), keep, identity);
    const int first_missing =
        committed.ok() ? -1 : FirstMissingRankFile(job_dir, step, communicator.world_size());
    if (first_missing >= 0) missing = first_missing;
  }
  std::vector<int32_t> all_committed = {committed.ok() ? 1 : 0, missing};
  FSDPD_RETURN_IF_ERROR(AllReduceHostInts(communicator, backend, &all_committed, ReduceOp::kMin));
  if (all_committed[1] != std::numeric_limits<int32_t>::max()) {
    // Every rank wrote its file before the barrier, yet rank 0 does not find one: they write
    // to different roots. A retry would place them the same way and fail the same way.
    return CheckpointRootNotShared(absl::StrCat(
        "committing the checkpoint of step ", step, " failed: rank 0 does not find rank ",
        all_committed[1], "'s file ", RankCheckpointPath(job_dir, step, all_committed[1])));
  }
  if (all_committed[0] == 0) {
    return absl::InternalError(
        absl::StrCat("committing the checkpoint of step ", step, " failed",
                     committed.ok() ? "" : absl::StrCat(": ", committed.message())));
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::CheckpointCommitted> DescribeCommittedCheckpoint(const std::string& job_dir,
                                                                    int64_t step, int world_size) {
  v1::CheckpointCommitted committed;
  committed.set_step(step);
  committed.set_world_size(world_size);
  committed.set_unix_millis(std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count());
  FSDPD_ASSIGN_OR_RETURN(const int64_t size, CheckpointSizeBytes(job_dir, step));
  committed.set_size_bytes(size);
  FSDPD_ASSIGN_OR_RETURN(const std::vector<int64_t> steps, ListCommittedSteps(job_dir));
  for (int64_t kept : steps) committed.add_committed_steps(kept);
  return committed;
}

}  // namespace fsdpd
