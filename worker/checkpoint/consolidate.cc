#include "worker/checkpoint/consolidate.h"

#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "worker/checkpoint/checkpoint.h"
#include "worker/fsdp/flat_shard_layout.h"
#include "worker/trainer_weights.h"

namespace fsdpd {
namespace {

absl::Status InDirectory(const std::string& job_dir, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(job_dir, ": ", status.message()));
}

// The master slice of `unit` in one rank's file, checked against the layout of that rank.
absl::StatusOr<const ShardBuffer*> MasterSlice(const RankCheckpoint& file, int unit,
                                               const FlatShardLayout& layout) {
  const std::string name = UnitBufferName(unit, kMasterPart);
  for (const ShardBuffer& buffer : file.buffers) {
    if (buffer.name != name) continue;
    if (static_cast<int64_t>(buffer.values.size()) != layout.shard_numel) {
      return absl::FailedPreconditionError(
          absl::StrCat("checkpoint step ", file.step, " rank ", file.rank, ": buffer ", name,
                       " holds ", buffer.values.size(), " values, this model needs ",
                       layout.shard_numel, " at world size ", file.world_size));
    }
    return &buffer;
  }
  return absl::FailedPreconditionError(absl::StrCat("checkpoint step ", file.step, " rank ",
                                                    file.rank, " has no buffer ", name,
                                                    ": it was written for another model"));
}

}  // namespace

absl::StatusOr<ConsolidatedCheckpoint> ConsolidateCheckpoint(const std::string& job_dir,
                                                             int64_t step,
                                                             const ModelConfig& config) {
  ConsolidatedCheckpoint result;
  result.step = step;
  absl::StatusOr<CheckpointIdentity> identity = ReadCheckpointIdentity(job_dir, step);
  if (!identity.ok()) {
    if (absl::IsNotFound(identity.status())) {
      return absl::NotFoundError(absl::StrCat(job_dir, ": no complete checkpoint of step ", step));
    }
    return InDirectory(job_dir, identity.status());
  }
  if (identity->world_size < 1) {
    return absl::DataLossError(
        absl::StrCat(job_dir, ": the manifest of step ", step, " records no world size"));
  }
  result.world_size = identity->world_size;
  result.job_uid = identity->job_uid;

  const std::vector<UnitLayout> units = BuildUnitLayouts(config);
  std::vector<std::vector<float>> unit_values(units.size());
  for (size_t unit = 0; unit < units.size(); ++unit) {
    unit_values[unit].reserve(static_cast<size_t>(
        ComputeFlatShardLayout(units[unit].numel, result.world_size, 0).padded_numel));
  }
  // One rank file in memory at a time: each contributes its slice of every unit, in rank order.
  for (int rank = 0; rank < result.world_size; ++rank) {
    absl::StatusOr<RankCheckpoint> file =
        LoadRankCheckpoint(job_dir, step, rank, result.world_size);
    if (!file.ok()) return InDirectory(job_dir, file.status());
    for (size_t unit = 0; unit < units.size(); ++unit) {
      const FlatShardLayout layout =
          ComputeFlatShardLayout(units[unit].numel, result.world_size, rank);
      absl::StatusOr<const ShardBuffer*> slice = MasterSlice(*file, static_cast<int>(unit), layout);
      if (!slice.ok()) return InDirectory(job_dir, slice.status());
      const std::vector<float>& values = (*slice)->values;
      unit_values[unit].insert(unit_values[unit].end(), values.begin(), values.end());
    }
  }
  for (size_t unit = 0; unit < units.size(); ++unit) {
    unit_values[unit].resize(static_cast<size_t>(units[unit].numel));  // FSDP's padding
  }
  result.tensors = TensorsOfUnits(units, unit_values);
  return result;
}

absl::StatusOr<int64_t> ExportCheckpoint(const std::string& job_dir, int64_t step,
                                         const ModelConfig& config, const std::string& path) {
  FSDPD_ASSIGN_OR_RETURN(ConsolidatedCheckpoint checkpoint,
                         ConsolidateCheckpoint(job_dir, step, config));
  FSDPD_RETURN_IF_ERROR(WriteExportedModel(path, step, config, checkpoint.tensors));
  std::error_code error;
  const uintmax_t size = std::filesystem::file_size(path, error);
  if (error) {
    return absl::InternalError(absl::StrCat("cannot stat ", path, ": ", error.message()));
  }
  return static_cast<int64_t>(size);
}

}  // namespace fsdpd
