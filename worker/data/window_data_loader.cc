#include "worker/data/window_data_loader.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "formats/mapped_file.h"
#include "spdlog/spdlog.h"
#include "worker/data/batch_rows.h"

namespace fsdpd {
namespace {

// Token files are little-endian; every host this daemon targets (x86-64, aarch64) is too.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "token files are read as little-endian");

uint32_t ReadToken(const uint8_t* data, int token_bytes, uint64_t index) {
  switch (token_bytes) {
    case 1:
      return data[index];
    case 2: {
      uint16_t value;
      std::memcpy(&value, data + index * 2, sizeof(value));
      return value;
    }
    default: {
      uint32_t value;
      std::memcpy(&value, data + index * 4, sizeof(value));
      return value;
    }
  }
}

// Tokens checked between two looks at the cancellation flag: a few milliseconds of scanning.
constexpr uint64_t kScanChunkTokens = uint64_t{1} << 22;

// Test-only fault: with FSDPD_TEST_WEDGE_READ set to a data file's resolved path, opening that
// file blocks forever and ignores cancellation, as a read from a hung network file system does,
// so tests can show that the worker gives up on such an attempt and reports itself unhealthy
// (tests/integration/wedged_worker_test.cc). Unset, as in every deployment, it does nothing.
void BlockForeverIfTestWedged(const std::string& path) {
  const char* wedged = std::getenv("FSDPD_TEST_WEDGE_READ");
  if (wedged == nullptr || path != wedged) return;
  spdlog::warn("FSDPD_TEST_WEDGE_READ: reading {} blocks forever", path);
  while (true) std::this_thread::sleep_for(std::chrono::hours(1));
}

class WindowDataLoader : public DataLoader {
 public:
  WindowDataLoader(const DataLoaderOptions& options, int token_bytes,
                   std::unique_ptr<MappedFile> file)
      : options_(options),
        token_bytes_(token_bytes),
        file_(std::move(file)),
        num_tokens_(static_cast<int64_t>(file_->size() / static_cast<size_t>(token_bytes))),
        num_windows_((num_tokens_ - 1) / options.data.seq_len()) {}

  absl::Status Batch(int64_t step, int32_t* inputs, int32_t* targets) override {
    const int64_t seq_len = options_.data.seq_len();
    return FillBatchRows(
        options_, step, inputs, targets,
        [&](unsigned __int128 global_row, int32_t* row_inputs, int32_t* row_targets) {
          const uint64_t window =
              static_cast<uint64_t>(global_row % static_cast<uint64_t>(num_windows_));
          const uint64_t start = window * static_cast<uint64_t>(seq_len);
          for (int64_t position = 0; position < seq_len; ++position) {
            row_inputs[position] =
                static_cast<int32_t>(ReadToken(file_->data(), token_bytes_, start + position));
            row_targets[position] =
                static_cast<int32_t>(ReadToken(file_->data(), token_bytes_, start + position + 1));
          }
        });
  }

  int64_t num_tokens() const override { return num_tokens_; }

 private:
  DataLoaderOptions options_;
  int token_bytes_;
  std::unique_ptr<MappedFile> file_;
  int64_t num_tokens_;
  int64_t num_windows_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<DataLoader>> CreateWindowDataLoader(const DataLoaderOptions& options,
                                                                   int token_bytes) {
  const std::string& path = options.data.path();
  BlockForeverIfTestWedged(path);
  auto file = MappedFile::Open(path, "data file");
  if (!file.ok()) return file.status();
  const size_t size = (*file)->size();
  if (size % static_cast<size_t>(token_bytes) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data file '", path, "' is ", size, " bytes, not a multiple of data.token_bytes = ",
        token_bytes, " (is it a uint", token_bytes * 8, " token file?)"));
  }
  const uint64_t num_tokens = size / static_cast<size_t>(token_bytes);
  const uint64_t needed = static_cast<uint64_t>(options.data.seq_len()) + 1;
  if (num_tokens < needed) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data file '", path, "' is too short for data.seq_len = ", options.data.seq_len(),
        ": needs at least ", needed, " tokens, has ", num_tokens));
  }
  // Bytes can never reach a vocab of 256 or more, which the caller has checked for text.
  if (token_bytes > 1) {
    const uint64_t vocab = static_cast<uint64_t>(options.vocab);
    for (uint64_t index = 0; index < num_tokens; ++index) {
      if (index % kScanChunkTokens == 0 && options.cancelled != nullptr &&
          options.cancelled->load()) {
        return absl::CancelledError(
            absl::StrCat("cancelled while checking data file '", path, "'"));
      }
      const uint32_t token = ReadToken((*file)->data(), token_bytes, index);
      if (token >= vocab) {
        return absl::InvalidArgumentError(absl::StrCat(
            "data file '", path, "': token ", index, " (byte offset ", index * token_bytes,
            ") has id ", token, ", which is not below model.vocab = ", options.vocab));
      }
    }
  }
  return std::unique_ptr<DataLoader>(new WindowDataLoader(options, token_bytes, std::move(*file)));
}

}  // namespace fsdpd
