#include "worker/checkpoint/rank_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "formats/durable_file.h"
#include "worker/checkpoint/crc32c.h"

namespace fsdpd {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "checkpoint files are little-endian");

constexpr char kMagic[8] = {'F', 'S', 'D', 'P', 'D', 'C', 'K', 'P'};
constexpr char kEndMagic[8] = {'F', 'S', 'D', 'P', 'D', 'E', 'N', 'D'};
constexpr uint32_t kVersion = 1;
constexpr size_t kFixedHeaderBytes = 8 + 4 + 4 + 8 + 4 + 4 + 8;
constexpr size_t kTrailerBytes = 4 + 8;
constexpr uint64_t kMaxNameBytes = 4096;

// Appends to the file while keeping the running checksum for the trailer.
class ChecksummedWriter {
 public:
  explicit ChecksummedWriter(DurableFileWriter* writer) : writer_(writer) {}
  absl::Status Append(const void* data, size_t size) {
    crc_ = Crc32cExtend(crc_, data, size);
    return writer_->Append(data, size);
  }
  template <typename T>
  absl::Status AppendValue(T value) {
    return Append(&value, sizeof(value));
  }
  uint32_t crc() const { return crc_; }

 private:
  DurableFileWriter* writer_;
  uint32_t crc_ = 0;
};

// Bounds-checked sequential reads over an untrusted buffer.
class Reader {
 public:
  explicit Reader(std::string_view bytes) : bytes_(bytes) {}
  template <typename T>
  bool Read(T* value) {
    if (remaining() < sizeof(T)) return false;
    std::memcpy(value, bytes_.data() + position_, sizeof(T));
    position_ += sizeof(T);
    return true;
  }
  bool ReadBytes(uint64_t size, std::string_view* out) {
    if (remaining() < size) return false;
    *out = bytes_.substr(position_, size);
    position_ += size;
    return true;
  }
  size_t remaining() const { return bytes_.size() - position_; }

 private:
  std::string_view bytes_;
  size_t position_ = 0;
};

absl::Status Corrupt(const std::string& reason) { return absl::DataLossError(reason); }

}  // namespace

absl::Status WriteRankFile(const std::string& path, const RankCheckpoint& state,
                           const std::atomic<bool>* cancelled) {
  DurableFileWriter file;
  if (auto status = file.Open(path); !status.ok()) return status;
  ChecksummedWriter writer(&file);
  absl::Status status = writer.Append(kMagic, sizeof(kMagic));
  if (status.ok()) status = writer.AppendValue<uint32_t>(kVersion);
  if (status.ok()) status = writer.AppendValue<uint32_t>(0);
  if (status.ok()) status = writer.AppendValue<int64_t>(state.step);
  if (status.ok()) status = writer.AppendValue<int32_t>(state.rank);
  if (status.ok()) status = writer.AppendValue<int32_t>(state.world_size);
  if (status.ok()) status = writer.AppendValue<int64_t>(state.data_position);
  if (status.ok()) status = writer.AppendValue<uint64_t>(state.rng_state.size());
  if (status.ok()) status = writer.Append(state.rng_state.data(), state.rng_state.size());
  if (status.ok()) status = writer.AppendValue<uint64_t>(state.buffers.size());
  for (const ShardBuffer& buffer : state.buffers) {
    if (!status.ok()) break;
    status = writer.AppendValue<uint64_t>(buffer.name.size());
    if (status.ok()) status = writer.Append(buffer.name.data(), buffer.name.size());
    if (status.ok()) status = writer.AppendValue<uint64_t>(buffer.values.size());
  }
  for (const ShardBuffer& buffer : state.buffers) {
    if (!status.ok()) break;
    if (cancelled != nullptr && cancelled->load()) {
      return absl::CancelledError(absl::StrCat("cancelled while writing ", path));
    }
    status = writer.Append(buffer.values.data(), buffer.values.size() * sizeof(float));
  }
  if (!status.ok()) return status;
  const uint32_t crc = writer.crc();
  if (auto append = file.Append(&crc, sizeof(crc)); !append.ok()) return append;
  if (auto append = file.Append(kEndMagic, sizeof(kEndMagic)); !append.ok()) return append;
  return file.Commit();
}

absl::StatusOr<RankFileSummary> SummarizeRankFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int error_number = errno;
    if (error_number == ENOENT) return absl::NotFoundError(absl::StrCat("missing ", path));
    return absl::InternalError(absl::StrCat("cannot open ", path, ": ", strerror(error_number)));
  }
  struct stat info {};
  char header[kFixedHeaderBytes];
  char trailer[kTrailerBytes];
  absl::Status status;
  if (fstat(fd, &info) != 0) {
    status = absl::InternalError(absl::StrCat("cannot stat ", path, ": ", strerror(errno)));
  } else if (static_cast<uint64_t>(info.st_size) < kFixedHeaderBytes + kTrailerBytes) {
    status = Corrupt(absl::StrCat(path, " is truncated (", info.st_size, " bytes)"));
  } else if (pread(fd, header, sizeof(header), 0) != static_cast<ssize_t>(sizeof(header)) ||
             pread(fd, trailer, sizeof(trailer), info.st_size - kTrailerBytes) !=
                 static_cast<ssize_t>(sizeof(trailer))) {
    status = absl::InternalError(absl::StrCat("cannot read ", path));
  }
  close(fd);
  if (!status.ok()) return status;
  uint32_t version;
  std::memcpy(&version, header + 8, sizeof(version));
  if (std::memcmp(header, kMagic, sizeof(kMagic)) != 0 || version != kVersion ||
      std::memcmp(trailer + 4, kEndMagic, sizeof(kEndMagic)) != 0) {
    return Corrupt(absl::StrCat(path, " is not a version ", kVersion, " fsdpd checkpoint file"));
  }
  RankFileSummary summary;
  summary.size_bytes = static_cast<uint64_t>(info.st_size);
  int32_t rank, world_size;
  std::memcpy(&summary.step, header + 16, sizeof(summary.step));
  std::memcpy(&rank, header + 24, sizeof(rank));
  std::memcpy(&world_size, header + 28, sizeof(world_size));
  summary.rank = rank;
  summary.world_size = world_size;
  uint32_t payload_crc;
  std::memcpy(&payload_crc, trailer, sizeof(payload_crc));
  // CRC32C extends: the whole file's checksum follows from the payload's and the trailer bytes.
  summary.crc32c = Crc32cExtend(payload_crc, trailer, sizeof(trailer));
  return summary;
}

absl::StatusOr<RankCheckpoint> ParseRankFile(std::string_view bytes) {
  if (bytes.size() < kFixedHeaderBytes + kTrailerBytes) {
    return Corrupt(absl::StrCat("file is truncated (", bytes.size(), " bytes)"));
  }
  const std::string_view payload = bytes.substr(0, bytes.size() - kTrailerBytes);
  const std::string_view trailer = bytes.substr(payload.size());
  uint32_t recorded_crc;
  std::memcpy(&recorded_crc, trailer.data(), sizeof(recorded_crc));
  if (std::memcmp(trailer.data() + 4, kEndMagic, sizeof(kEndMagic)) != 0) {
    return Corrupt("file trailer is missing (truncated or not a checkpoint file)");
  }
  if (Crc32c(payload) != recorded_crc) return Corrupt("checksum mismatch in file trailer");

  Reader reader(payload);
  char magic[8];
  uint32_t version = 0, flags = 0;
  int32_t rank = 0, world_size = 0;
  RankCheckpoint state;
  if (!reader.Read(&magic) || std::memcmp(magic, kMagic, sizeof(kMagic)) != 0) {
    return Corrupt("not an fsdpd checkpoint file (bad magic)");
  }
  if (!reader.Read(&version) || version != kVersion) {
    return Corrupt(absl::StrCat("unsupported checkpoint file version ", version));
  }
  if (!reader.Read(&flags) || !reader.Read(&state.step) || !reader.Read(&rank) ||
      !reader.Read(&world_size) || !reader.Read(&state.data_position)) {
    return Corrupt("file header is truncated");
  }
  state.rank = rank;
  state.world_size = world_size;
  uint64_t rng_bytes = 0;
  std::string_view rng_state;
  if (!reader.Read(&rng_bytes) || !reader.ReadBytes(rng_bytes, &rng_state)) {
    return Corrupt("rng state runs past the end of the file");
  }
  state.rng_state = std::string(rng_state);
  uint64_t buffer_count = 0;
  // Each table entry takes at least 16 bytes, which bounds a corrupt count before allocating.
  if (!reader.Read(&buffer_count) || buffer_count > reader.remaining() / 16) {
    return Corrupt("buffer table is truncated");
  }
  std::vector<uint64_t> counts(buffer_count);
  state.buffers.resize(buffer_count);
  for (uint64_t index = 0; index < buffer_count; ++index) {
    uint64_t name_bytes = 0;
    std::string_view name;
    if (!reader.Read(&name_bytes) || name_bytes > kMaxNameBytes ||
        !reader.ReadBytes(name_bytes, &name) || !reader.Read(&counts[index])) {
      return Corrupt(absl::StrCat("buffer table entry ", index, " is malformed"));
    }
    state.buffers[index].name = std::string(name);
  }
  for (uint64_t index = 0; index < buffer_count; ++index) {
    std::string_view values;
    if (counts[index] > reader.remaining() / sizeof(float) ||
        !reader.ReadBytes(counts[index] * sizeof(float), &values)) {
      return Corrupt(
          absl::StrCat("buffer '", state.buffers[index].name, "' runs past the end of the file"));
    }
    state.buffers[index].values.resize(counts[index]);
    if (!values.empty()) {
      std::memcpy(state.buffers[index].values.data(), values.data(), values.size());
    }
  }
  if (reader.remaining() != 0) {
    return Corrupt(absl::StrCat(reader.remaining(), " unexpected bytes after the last buffer"));
  }
  return state;
}

}  // namespace fsdpd
