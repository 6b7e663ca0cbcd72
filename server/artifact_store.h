// The files workers upload, kept under <artifact_dir>/<job>/: the model rank 0 exports at the end
// of a successful attempt (model.safetensors), and the exports of the job's checkpoints
// (model-step-<8 digits>.safetensors, server/job_manager_exports.cc). Chunks go to a temporary file
// that is renamed on the last chunk, so a reader never sees a partial artifact.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fsdpd/v1/worker.pb.h"

namespace fsdpd::server {

class ArtifactStore {
 public:
  static constexpr char kModelArtifact[] = "model.safetensors";
  // The export of a job's checkpoint of `step`: "model-step-00000120.safetensors".
  static std::string CheckpointArtifactName(int64_t step);

  explicit ArtifactStore(std::string root) : root_(std::move(root)) {}

  // Writes one chunk at its offset. A chunk reaching past `max_bytes`, or announcing a larger
  // total, is RESOURCE_EXHAUSTED and drops what the upload had written.
  absl::Status WriteChunk(const v1::ArtifactChunk& chunk, int64_t max_bytes);
  // The path of a complete artifact; NOT_FOUND when the job has none.
  // Names are kModelArtifact or CheckpointArtifactName's; anything else is INVALID_ARGUMENT.
  absl::StatusOr<std::string> Find(const std::string& job_id, const std::string& name) const;
  static absl::Status CheckName(const std::string& name);

 private:
  std::string Directory(const std::string& job_id) const;
  const std::string root_;
  std::mutex mutex_;
};

}  // namespace fsdpd::server
