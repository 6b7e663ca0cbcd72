#include "worker/data/data_loader.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "worker/data/batch_rows.h"
#include "worker/data/sharded_data_loader.h"
#include "worker/data/synthetic_tokens.h"
#include "worker/data/token_shards.h"
#include "worker/data/window_data_loader.h"

namespace fsdpd {
namespace {

class SyntheticDataLoader : public DataLoader {
 public:
  explicit SyntheticDataLoader(const DataLoaderOptions& options) : options_(options) {}

  absl::Status Batch(int64_t step, int32_t* inputs, int32_t* targets) override {
    const int64_t seq_len = options_.data.seq_len();
    return FillBatchRows(
        options_, step, inputs, targets,
        [&](unsigned __int128 global_row, int32_t* row_inputs, int32_t* row_targets) {
          // Wrapping at 2^64 rows is harmless: rows only need to be distinct within a run.
          const auto row = static_cast<uint64_t>(global_row);
          for (int64_t position = 0; position < seq_len; ++position) {
            row_inputs[position] = SyntheticToken(options_.seed, row, SyntheticStream::kInputs,
                                                  static_cast<uint64_t>(position), options_.vocab);
            row_targets[position] = SyntheticToken(options_.seed, row, SyntheticStream::kTargets,
                                                   static_cast<uint64_t>(position), options_.vocab);
          }
        });
  }

  int64_t num_tokens() const override { return -1; }

 private:
  DataLoaderOptions options_;
};

absl::Status CheckOptions(const DataLoaderOptions& options) {
  if (options.vocab <= 0 || options.vocab > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.vocab must be between 1 and 2147483647 for int32 token ids (got ",
                     options.vocab, ")"));
  }
  if (options.data.seq_len() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("data.seq_len must be positive (got ", options.data.seq_len(), ")"));
  }
  if (options.batch_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("train.batch_size must be positive (got ", options.batch_size, ")"));
  }
  if (options.world_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("parallel.world_size must be positive (got ", options.world_size, ")"));
  }
  if (options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", options.rank, " is outside world size ", options.world_size));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<DataLoader>> CreateDataLoader(const DataLoaderOptions& options) {
  if (auto status = CheckOptions(options); !status.ok()) return status;
  const std::string& source = options.data.source();
  if (source == "synthetic") {
    return std::unique_ptr<DataLoader>(new SyntheticDataLoader(options));
  }
  if (source == "tokens" || source == "text") {
    if (options.data.path().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("data.source '", source, "' needs data.path (the file to read)"));
    }
    if (source == "text") {
      if (IsShardedTokenPath(options.data.path())) {
        return absl::InvalidArgumentError(absl::StrCat(
            "data.path '", options.data.path(),
            "': data.source 'text' reads one file; a folder or manifest of shards needs "
            "data.source 'tokens' (fsdpd.data.write_shards turns text into such shards)"));
      }
      if (options.vocab < 256) {
        return absl::InvalidArgumentError(absl::StrCat(
            "data.source 'text' uses a byte-level tokenizer and needs model.vocab >= 256 (got ",
            options.vocab, ")"));
      }
      return CreateWindowDataLoader(options, 1);
    }
    const int token_bytes = options.data.token_bytes();
    if (token_bytes != 2 && token_bytes != 4) {
      return absl::InvalidArgumentError(absl::StrCat(
          "data.token_bytes must be 2 (uint16) or 4 (uint32) for data.source 'tokens' (got ",
          token_bytes, ")"));
    }
    if (IsShardedTokenPath(options.data.path())) return CreateShardedDataLoader(options);
    return CreateWindowDataLoader(options, token_bytes);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("data.source must be 'synthetic', 'tokens' or 'text' (got '", source, "')"));
}

}  // namespace fsdpd
