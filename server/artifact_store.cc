#include "server/artifact_store.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/path_component.h"

namespace fsdpd::server {

namespace fs = std::filesystem;

namespace {

constexpr char kStepPrefix[] = "model-step-";
constexpr char kStepSuffix[] = ".safetensors";

// model-step-<8 or more digits>.safetensors
bool IsCheckpointArtifactName(const std::string& name) {
  const std::string prefix = kStepPrefix, suffix = kStepSuffix;
  if (name.size() < prefix.size() + 8 + suffix.size() || name.compare(0, prefix.size(), prefix) ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix)) {
    return false;
  }
  const std::string digits =
      name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  return digits.size() <= 18 &&
         std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

std::string ArtifactStore::CheckpointArtifactName(int64_t step) {
  return absl::StrFormat("%s%08d%s", kStepPrefix, step, kStepSuffix);
}

absl::Status ArtifactStore::CheckName(const std::string& name) {
  // Names come from workers. A job has its exported model and its checkpoints' exports; any
  // other name would let a worker write files of its choosing, each up to the model's bound.
  if (name != kModelArtifact && !IsCheckpointArtifactName(name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("artifact name \"", name.substr(0, 64), "\" is neither ", kModelArtifact,
                     " nor a checkpoint's export (", kStepPrefix, "<8 digits>", kStepSuffix, ")"));
  }
  return absl::OkStatus();
}

std::string ArtifactStore::Directory(const std::string& job_id) const {
  return (fs::path(root_) / job_id).string();
}

absl::Status ArtifactStore::WriteChunk(const v1::ArtifactChunk& chunk, int64_t max_bytes) {
  const std::string name = chunk.name().empty() ? kModelArtifact : chunk.name();
  if (absl::Status status = CheckName(name); !status.ok()) return status;
  if (absl::Status status = CheckPathComponent("artifact chunk job_id", chunk.job_id());
      !status.ok()) {
    return status;
  }
  if (chunk.chunk().offset() < 0) {
    return absl::InvalidArgumentError("artifact chunk offset must not be negative");
  }
  std::lock_guard<std::mutex> lock(mutex_);
  const fs::path directory = Directory(chunk.job_id());
  std::error_code error;
  fs::create_directories(directory, error);
  if (error) {
    return absl::InternalError(
        absl::StrCat("cannot create ", directory.string(), ": ", error.message()));
  }
  const fs::path partial = directory / (name + ".partial");
  // Compared without adding first: an offset near INT64_MAX must not overflow.
  const int64_t offset = chunk.chunk().offset();
  const auto chunk_bytes = static_cast<int64_t>(chunk.chunk().data().size());
  if (offset > max_bytes || chunk_bytes > max_bytes - offset ||
      chunk.chunk().total_bytes() > max_bytes) {
    fs::remove(partial, error);
    return absl::ResourceExhaustedError(absl::StrCat(
        "artifact ", name, " of ", chunk.job_id(), " goes past the ", max_bytes,
        " bytes that the job's model can take in fp32 (a chunk of ", chunk_bytes,
        " bytes at offset ", offset, ", announced total ", chunk.chunk().total_bytes(), ")"));
  }
  if (chunk.chunk().offset() == 0) fs::remove(partial, error);
  {
    std::fstream file(partial, std::ios::in | std::ios::out | std::ios::binary);
    if (!file.is_open()) file.open(partial, std::ios::out | std::ios::binary);
    if (!file.is_open()) {
      return absl::InternalError(absl::StrCat("cannot open ", partial.string()));
    }
    file.seekp(chunk.chunk().offset());
    file.write(chunk.chunk().data().data(),
               static_cast<std::streamsize>(chunk.chunk().data().size()));
    file.flush();
    if (!file) return absl::InternalError(absl::StrCat("cannot write ", partial.string()));
  }
  if (!chunk.last()) return absl::OkStatus();
  const int64_t size = static_cast<int64_t>(fs::file_size(partial, error));
  if (chunk.chunk().total_bytes() > 0 && size != chunk.chunk().total_bytes()) {
    fs::remove(partial, error);
    return absl::DataLossError(absl::StrCat("artifact ", name, " of ", chunk.job_id(), " has ",
                                            size, " bytes but the worker announced ",
                                            chunk.chunk().total_bytes()));
  }
  fs::rename(partial, directory / name, error);
  if (error) {
    return absl::InternalError(
        absl::StrCat("cannot rename ", partial.string(), ": ", error.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ArtifactStore::Find(const std::string& job_id,
                                                const std::string& name) const {
  const fs::path path = fs::path(Directory(job_id)) / name;
  std::error_code error;
  if (!fs::is_regular_file(path, error)) {
    return absl::NotFoundError(absl::StrCat("job ", job_id, " has no exported ", name,
                                            name == kModelArtifact
                                                ? " (rank 0 uploads it when the job succeeds)"
                                                : " (PrepareExport makes it)"));
  }
  return path.string();
}

}  // namespace fsdpd::server
