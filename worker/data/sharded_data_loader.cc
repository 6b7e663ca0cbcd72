#include "worker/data/sharded_data_loader.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/data/batch_rows.h"
#include "worker/data/sample_order.h"
#include "worker/data/token_shards.h"

namespace fsdpd {
namespace {

class ShardedDataLoader : public DataLoader {
 public:
  ShardedDataLoader(const DataLoaderOptions& options, std::vector<TokenShard> shards)
      : options_(options), shards_(std::move(shards)) {
    for (const TokenShard& shard : shards_) {
      windows_ += shard.windows;
      tokens_ += static_cast<int64_t>(shard.tokens);
    }
  }

  absl::Status Batch(int64_t step, int32_t* inputs, int32_t* targets) override {
    const int64_t seq_len = options_.data.seq_len();
    std::vector<int32_t> window(static_cast<size_t>(seq_len) + 1);
    absl::Status status;
    absl::Status rows = FillBatchRows(
        options_, step, inputs, targets,
        [&](unsigned __int128 global_row, int32_t* row_inputs, int32_t* row_targets) {
          if (!status.ok()) return;
          // 2^64 rows are more than any run reads: the row wraps harmlessly there.
          const uint64_t sample =
              SampleWindow(options_.seed, static_cast<uint64_t>(global_row), windows_);
          // The last shard whose first window is at or before the sample holds it.
          const auto holder = std::upper_bound(shards_.begin(), shards_.end(), sample,
                                               [](uint64_t value, const TokenShard& shard) {
                                                 return value < shard.first_window;
                                               }) -
                              1;
          const uint64_t first_token =
              (sample - holder->first_window) * static_cast<uint64_t>(seq_len);
          status = ReadShardTokens(*holder, options_.data.token_bytes(), first_token, window.size(),
                                   window.data());
          if (!status.ok()) return;
          std::copy(window.begin(), window.end() - 1, row_inputs);
          std::copy(window.begin() + 1, window.end(), row_targets);
        });
    return rows.ok() ? status : rows;
  }

  int64_t num_tokens() const override { return tokens_; }

 private:
  DataLoaderOptions options_;
  std::vector<TokenShard> shards_;
  uint64_t windows_ = 0;
  int64_t tokens_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<DataLoader>> CreateShardedDataLoader(
    const DataLoaderOptions& options) {
  TokenShardOptions shard_options;
  shard_options.token_bytes = options.data.token_bytes();
  shard_options.seq_len = options.data.seq_len();
  shard_options.vocab = options.vocab;
  shard_options.allowed_roots = options.allowed_roots;
  shard_options.cancelled = options.cancelled;
  absl::StatusOr<std::vector<TokenShard>> shards =
      OpenTokenShards(options.data.path(), shard_options);
  if (!shards.ok()) return shards.status();
  return std::unique_ptr<DataLoader>(new ShardedDataLoader(options, std::move(*shards)));
}

}  // namespace fsdpd
