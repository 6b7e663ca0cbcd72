#include "worker/checkpoint/checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "formats/durable_file.h"
#include "formats/mapped_file.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"
#include "worker/checkpoint/crc32c.h"
#include "worker/checkpoint/rank_file.h"
#include "worker/checkpoint/root_probe.h"
#include "worker/data/path_policy.h"

namespace fsdpd {
namespace {

namespace fs = std::filesystem;

constexpr char kManifestName[] = "MANIFEST.json";
constexpr char kLatestName[] = "LATEST";
constexpr char kStepPrefix[] = "step-";
constexpr char kManifestFormat[] = "fsdpd-checkpoint";
constexpr int kManifestVersion = 1;

std::string StepDirectory(const std::string& job_dir, int64_t step) {
  return absl::StrFormat("%s/%s%08d", job_dir, kStepPrefix, step);
}

std::string RankFileName(int rank) { return absl::StrFormat("rank-%05d.bin", rank); }

std::string Prefix(int64_t step, int rank) {
  return absl::StrCat("checkpoint step ", step, " rank ", rank, ": ");
}

absl::Status WithPrefix(const std::string& prefix, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(prefix, status.message()));
}

std::string Hex(uint32_t value) { return absl::StrFormat("0x%08x", value); }

// A manifest is read only when it is a regular file: anything else put in its place (a FIFO)
// would block the read. Rank files go through MappedFile, which checks what it opened.
absl::Status ReadManifest(const std::string& path, std::string* contents) {
  if (absl::Status status = CheckRegularFile(path); !status.ok()) {
    return absl::DataLossError(status.message());
  }
  return ReadSmallFile(path, contents);
}

absl::Status CreateDirectory(const std::string& directory) {
  std::error_code error;
  fs::create_directories(directory, error);
  if (error) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create checkpoint directory '", directory, "': ", error.message()));
  }
  return absl::OkStatus();
}

struct StepDirectoryEntry {
  int64_t step;
  std::string path;
  bool committed;
};

// Step directories under job_dir, newest first. A missing job_dir has none.
absl::StatusOr<std::vector<StepDirectoryEntry>> ScanStepDirectories(const std::string& job_dir) {
  std::vector<StepDirectoryEntry> entries;
  std::error_code error;
  if (!fs::exists(job_dir, error)) return entries;
  fs::directory_iterator iterator(job_dir, error);
  if (error) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot list checkpoint directory '", job_dir, "': ", error.message()));
  }
  for (const fs::directory_entry& entry : iterator) {
    const std::string name = entry.path().filename().string();
    int64_t step = 0;
    if (!absl::StartsWith(name, kStepPrefix) ||
        !absl::SimpleAtoi(name.substr(sizeof(kStepPrefix) - 1), &step) || step < 0 ||
        !entry.is_directory(error)) {
      continue;
    }
    const bool committed = fs::is_regular_file(entry.path() / kManifestName, error);
    entries.push_back({step, entry.path().string(), committed});
  }
  std::sort(
      entries.begin(), entries.end(),
      [](const StepDirectoryEntry& a, const StepDirectoryEntry& b) { return a.step > b.step; });
  return entries;
}

// Unlinks the manifest first so a half-deleted directory never looks committed.
void RemoveStepDirectory(const StepDirectoryEntry& entry) {
  std::error_code error;
  fs::remove(fs::path(entry.path) / kManifestName, error);
  fs::remove_all(entry.path, error);
  if (error) {
    spdlog::warn("checkpoint retention: cannot remove '{}': {}", entry.path, error.message());
  } else {
    spdlog::info("checkpoint retention: removed step {} ({})", entry.step,
                 entry.committed ? "older than the newest kept" : "incomplete");
  }
}

// Temp files left by writers that crashed before their rename. Called only by the committing
// rank after the barrier, when no other writer is active in these directories.
void RemoveStaleTempFiles(const std::string& directory) {
  std::error_code error;
  fs::directory_iterator iterator(directory, error);
  if (error) return;
  for (const fs::directory_entry& entry : iterator) {
    if (entry.path().filename().string().find(".tmp-") == std::string::npos) continue;
    std::error_code remove_error;
    fs::remove(entry.path(), remove_error);
  }
}

}  // namespace

std::string UnitBufferName(int unit, const std::string& part) {
  return absl::StrCat("unit.", unit, ".", part);
}

absl::Status WriteRankCheckpoint(const std::string& job_dir, const RankCheckpoint& state,
                                 const std::atomic<bool>* cancelled) {
  const std::string prefix = Prefix(state.step, state.rank);
  if (state.step < 0 || state.world_size < 1 || state.rank < 0 || state.rank >= state.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, "invalid step, rank or world size ", state.world_size));
  }
  for (const ShardBuffer& buffer : state.buffers) {
    if (buffer.name.empty() || buffer.name.size() > 4096) {
      return absl::InvalidArgumentError(
          absl::StrCat(prefix, "buffer names must be 1 to 4096 bytes long"));
    }
  }
  const std::string step_dir = StepDirectory(job_dir, state.step);
  if (auto status = CreateDirectory(step_dir); !status.ok()) return WithPrefix(prefix, status);
  if (auto status = SyncDirectory(job_dir); !status.ok()) return WithPrefix(prefix, status);
  // Rewriting a step that was committed before (a rerun after restoring an older checkpoint)
  // first withdraws its manifest, so the step is never committed with a mix of old and new
  // rank files.
  const std::string manifest = step_dir + "/" + kManifestName;
  if (unlink(manifest.c_str()) == 0) {
    if (auto status = SyncDirectory(step_dir); !status.ok()) return WithPrefix(prefix, status);
  }
  if (auto status = WriteRankFile(step_dir + "/" + RankFileName(state.rank), state, cancelled);
      !status.ok()) {
    return WithPrefix(prefix, status);
  }
  return absl::OkStatus();
}

std::string RankCheckpointPath(const std::string& job_dir, int64_t step, int rank) {
  return StepDirectory(job_dir, step) + "/" + RankFileName(rank);
}

int FirstMissingRankFile(const std::string& job_dir, int64_t step, int world_size) {
  for (int rank = 0; rank < world_size; ++rank) {
    std::error_code error;
    if (!fs::exists(RankCheckpointPath(job_dir, step, rank), error) && !error) return rank;
  }
  return -1;
}

absl::Status CommitCheckpoint(const std::string& job_dir, int64_t step, int world_size, int keep,
                              const CheckpointIdentity& identity) {
  const std::string prefix = absl::StrCat("checkpoint step ", step, ": ");
  if (keep < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, "checkpoint.keep must be at least 1 (got ", keep, ")"));
  }
  if (world_size < 1 || step < 0) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, "invalid world size ", world_size));
  }
  const std::string step_dir = StepDirectory(job_dir, step);
  nlohmann::json ranks = nlohmann::json::array();
  for (int rank = 0; rank < world_size; ++rank) {
    auto summary = SummarizeRankFile(step_dir + "/" + RankFileName(rank));
    if (absl::IsNotFound(summary.status())) {
      return CheckpointRootNotShared(absl::StrCat(Prefix(step, rank), summary.status().message()));
    }
    if (!summary.ok()) return WithPrefix(Prefix(step, rank), summary.status());
    if (summary->step != step || summary->rank != rank || summary->world_size != world_size) {
      return absl::DataLossError(absl::StrCat(
          Prefix(step, rank), "file holds step ", summary->step, " rank ", summary->rank,
          " of world size ", summary->world_size, ", expected world size ", world_size));
    }
    ranks.push_back({{"rank", rank},
                     {"file", RankFileName(rank)},
                     {"size_bytes", summary->size_bytes},
                     {"crc32c", summary->crc32c}});
  }
  const nlohmann::json manifest = {{"format", kManifestFormat},
                                   {"version", kManifestVersion},
                                   {"step", step},
                                   {"world_size", world_size},
                                   {"job_uid", identity.job_uid},
                                   {"attempt", identity.attempt},
                                   {"fingerprint", identity.fingerprint},
                                   {"checksum", "crc32c"},
                                   {"ranks", ranks}};
  if (auto status = WriteFileDurably(step_dir + "/" + kManifestName, manifest.dump(2) + "\n");
      !status.ok()) {
    return WithPrefix(prefix, status);
  }
  // LATEST is only a hint for people and tools; loading always scans for manifests.
  if (auto status = WriteFileDurably(job_dir + "/" + kLatestName, absl::StrCat(step, "\n"));
      !status.ok()) {
    spdlog::warn("{}cannot update {}: {}", prefix, kLatestName, std::string(status.message()));
  }

  RemoveStaleTempFiles(step_dir);
  RemoveStaleTempFiles(job_dir);

  auto entries = ScanStepDirectories(job_dir);
  if (!entries.ok()) {
    // The checkpoint is committed; a failed cleanup only costs disk space.
    spdlog::warn("{}retention skipped: {}", prefix, std::string(entries.status().message()));
    return absl::OkStatus();
  }
  int committed_seen = 0;
  for (const StepDirectoryEntry& entry : *entries) {
    if (entry.committed) {
      if (++committed_seen > keep) RemoveStepDirectory(entry);
    } else if (entry.step < step) {
      RemoveStepDirectory(entry);
    }
  }
  if (auto status = SyncDirectory(job_dir); !status.ok()) {
    spdlog::warn("{}{}", prefix, std::string(status.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int64_t>> ListCommittedSteps(const std::string& job_dir) {
  auto entries = ScanStepDirectories(job_dir);
  if (!entries.ok()) return entries.status();
  std::vector<int64_t> steps;
  for (const StepDirectoryEntry& entry : *entries) {
    if (entry.committed) steps.push_back(entry.step);
  }
  return steps;
}

absl::StatusOr<CheckpointIdentity> ReadCheckpointIdentity(const std::string& job_dir,
                                                          int64_t step) {
  const std::string prefix = absl::StrCat("checkpoint step ", step, ": ");
  std::string text;
  if (auto status = ReadManifest(StepDirectory(job_dir, step) + "/" + kManifestName, &text);
      !status.ok()) {
    return WithPrefix(prefix, status);
  }
  const nlohmann::json manifest = nlohmann::json::parse(text, nullptr, false);
  if (manifest.is_discarded() || !manifest.is_object()) {
    return absl::DataLossError(absl::StrCat(prefix, kManifestName, " is malformed"));
  }
  CheckpointIdentity identity;
  if (manifest.contains("job_uid") && manifest["job_uid"].is_string()) {
    identity.job_uid = manifest["job_uid"].get<std::string>();
  }
  if (manifest.contains("attempt") && manifest["attempt"].is_number_integer()) {
    identity.attempt = manifest["attempt"].get<int>();
  }
  if (manifest.contains("fingerprint") && manifest["fingerprint"].is_string()) {
    identity.fingerprint = manifest["fingerprint"].get<std::string>();
  }
  if (manifest.contains("world_size") && manifest["world_size"].is_number_integer()) {
    identity.world_size = manifest["world_size"].get<int>();
  }
  return identity;
}

absl::StatusOr<int64_t> CheckpointSizeBytes(const std::string& job_dir, int64_t step) {
  const std::string step_dir = StepDirectory(job_dir, step);
  std::error_code error;
  fs::directory_iterator iterator(step_dir, error);
  if (error) {
    return absl::NotFoundError(
        absl::StrCat("cannot list checkpoint directory '", step_dir, "': ", error.message()));
  }
  int64_t total = 0;
  for (const fs::directory_entry& entry : iterator) {
    // Temp files of a writer that crashed are not part of the checkpoint.
    if (entry.path().filename().string().find(".tmp-") != std::string::npos) continue;
    std::error_code size_error;
    if (!entry.is_regular_file(size_error)) continue;
    const uintmax_t size = entry.file_size(size_error);
    if (!size_error) total += static_cast<int64_t>(size);
  }
  return total;
}

absl::StatusOr<RankCheckpoint> LoadRankCheckpoint(const std::string& job_dir, int64_t step,
                                                  int rank, int world_size) {
  const std::string prefix = Prefix(step, rank);
  const std::string step_dir = StepDirectory(job_dir, step);
  std::string manifest_text;
  if (auto status = ReadManifest(step_dir + "/" + kManifestName, &manifest_text); !status.ok()) {
    if (absl::IsNotFound(status)) {
      return absl::NotFoundError(absl::StrCat(prefix, "not committed (no ", kManifestName, ")"));
    }
    return WithPrefix(prefix, status);
  }
  const nlohmann::json manifest = nlohmann::json::parse(manifest_text, nullptr, false);
  if (manifest.is_discarded() || !manifest.is_object() || !manifest.contains("format") ||
      manifest["format"] != kManifestFormat || !manifest.contains("world_size") ||
      !manifest["world_size"].is_number_integer() || !manifest.contains("step") ||
      !manifest["step"].is_number_integer() || !manifest.contains("ranks") ||
      !manifest["ranks"].is_array()) {
    return absl::DataLossError(absl::StrCat(prefix, kManifestName, " is malformed"));
  }
  if (manifest["step"].get<int64_t>() != step) {
    return absl::DataLossError(
        absl::StrCat(prefix, kManifestName, " names step ", manifest["step"].get<int64_t>()));
  }
  const int64_t manifest_world_size = manifest["world_size"].get<int64_t>();
  if (manifest_world_size != world_size) {
    return absl::FailedPreconditionError(absl::StrCat(prefix, "written at world size ",
                                                      manifest_world_size,
                                                      ", this run has world size ", world_size));
  }
  if (rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, "rank outside world size ", world_size));
  }
  const nlohmann::json* record = nullptr;
  for (const nlohmann::json& candidate : manifest["ranks"]) {
    if (candidate.is_object() && candidate.contains("rank") &&
        candidate["rank"].is_number_integer() && candidate["rank"].get<int64_t>() == rank) {
      record = &candidate;
    }
  }
  if (record == nullptr || !record->contains("file") || !(*record)["file"].is_string() ||
      !record->contains("size_bytes") || !(*record)["size_bytes"].is_number_unsigned() ||
      !record->contains("crc32c") || !(*record)["crc32c"].is_number_unsigned()) {
    return absl::DataLossError(
        absl::StrCat(prefix, kManifestName, " has no valid entry for this rank"));
  }
  // The manifest only names files; it cannot point the loader outside the step directory.
  const std::string file_name = RankFileName(rank);
  if ((*record)["file"].get<std::string>() != file_name) {
    return absl::DataLossError(absl::StrCat(prefix, kManifestName, " names file '",
                                            (*record)["file"].get<std::string>(), "', expected '",
                                            file_name, "'"));
  }
  auto file = MappedFile::Open(step_dir + "/" + file_name, "checkpoint file");
  if (!file.ok()) {
    if (absl::IsNotFound(file.status())) {
      return absl::DataLossError(absl::StrCat(prefix, file_name, " is missing"));
    }
    return WithPrefix(prefix, file.status());
  }
  const uint64_t expected_size = (*record)["size_bytes"].get<uint64_t>();
  if ((*file)->size() != expected_size) {
    return absl::DataLossError(absl::StrCat(prefix, "size mismatch (", file_name, " is ",
                                            (*file)->size(), " bytes, the manifest records ",
                                            expected_size, ")"));
  }
  const uint64_t expected_crc = (*record)["crc32c"].get<uint64_t>();
  const std::string_view bytes(reinterpret_cast<const char*>((*file)->data()), (*file)->size());
  const uint32_t actual_crc = Crc32c(bytes);
  if (actual_crc != expected_crc) {
    return absl::DataLossError(absl::StrCat(prefix, "checksum mismatch (CRC32C of ", file_name,
                                            " is ", Hex(actual_crc), ", the manifest records ",
                                            Hex(static_cast<uint32_t>(expected_crc)), ")"));
  }
  auto state = ParseRankFile(bytes);
  if (!state.ok()) return WithPrefix(prefix, state.status());
  if (state->step != step || state->rank != rank || state->world_size != world_size) {
    return absl::DataLossError(absl::StrCat(prefix, file_name, " holds step ", state->step,
                                            " rank ", state->rank, " of world size ",
                                            state->world_size));
  }
  return std::move(*state);
}

absl::StatusOr<std::optional<RankCheckpoint>> LoadLatestRankCheckpoint(
    const std::string& job_dir, int rank, int world_size, std::vector<std::string>* skipped) {
  auto steps = ListCommittedSteps(job_dir);
  if (!steps.ok()) return steps.status();
  for (int64_t step : *steps) {
    auto state = LoadRankCheckpoint(job_dir, step, rank, world_size);
    if (state.ok()) return std::optional<RankCheckpoint>(std::move(*state));
    spdlog::warn("skipping {}", std::string(state.status().message()));
    if (skipped != nullptr) skipped->push_back(std::string(state.status().message()));
  }
  return std::optional<RankCheckpoint>();
}

}  // namespace fsdpd
