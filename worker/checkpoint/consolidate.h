// One committed checkpoint as whole tensors: every rank file of the step is read and verified
// (LoadRankCheckpoint: manifest, size, CRC32C), each unit's fp32 master slices are concatenated
// in rank order and FSDP's padding is cut off (worker/fsdp/flat_shard_layout.h), and the units
// are split into PyTorch's named parameters. It serves two callers: exporting a checkpoint of
// any job as the same safetensors file the trainer exports at the end of a run, and starting a
// job from another job's checkpoint at another world size (checkpoint.init_from_job_uid).
// Master weights only; the optimizer's moments are read (they are in the same files) but not
// returned.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "formats/safetensors.h"
#include "worker/model/model_config.h"

namespace fsdpd {

struct ConsolidatedCheckpoint {
  int64_t step = 0;
  int world_size = 0;   // of the run that wrote it, from its manifest
  std::string job_uid;  // the job that wrote it, from its manifest ("" when not recorded)
  std::vector<NamedTensor> tensors;
};

// Reads committed `step` under `job_dir` for a model of `config`. A step without a manifest is
// NOT_FOUND; a missing, truncated or corrupt rank file is DATA_LOSS naming the file; rank
// files that do not hold this model's units are FAILED_PRECONDITION naming the buffer. Every
// message starts with `job_dir`.
absl::StatusOr<ConsolidatedCheckpoint> ConsolidateCheckpoint(const std::string& job_dir,
                                                             int64_t step,
                                                             const ModelConfig& config);

// ConsolidateCheckpoint, then writes the tensors to `path` as the trainer's export does
// (WriteExportedModel, worker/trainer_weights.h). Returns the file's size in bytes.
absl::StatusOr<int64_t> ExportCheckpoint(const std::string& job_dir, int64_t step,
                                         const ModelConfig& config, const std::string& path);

}  // namespace fsdpd
