// Token batches for one rank. Every rank reads a disjoint part of each global batch:
// global batch g holds batch_size × world_size windows, and rank r takes windows
// [r·batch_size, (r+1)·batch_size). The position is a plain step counter, so it is
// deterministic and resumable from a checkpoint.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "fsdpd/v1/spec.pb.h"

namespace fsdpd {

struct DataLoaderOptions {
  v1::DataSpec data;
  int64_t vocab = 0;
  int64_t batch_size = 1;  // per rank
  int rank = 0;
  int world_size = 1;
  uint64_t seed = 0;
  // Where a sharded dataset's shards may lie (worker/data/token_shards.h); empty: anywhere. The
  // spec's own path fields are confined before (ResolveSpecPaths).
  std::vector<std::string> allowed_roots;
  // When set and true, opening a file source stops between chunks of its scan with CANCELLED
  // (an attempt cancelled while it checks a large token file ends without reading the rest).
  const std::atomic<bool>* cancelled = nullptr;
};

class DataLoader {
 public:
  virtual ~DataLoader() = default;
  // Fills inputs and targets, each batch_size × seq_len token ids (row-major), with the
  // batch for global step `step` (0-based). The same step always gives the same batch.
  virtual absl::Status Batch(int64_t step, int32_t* inputs, int32_t* targets) = 0;
  // Total tokens available (synthetic: unbounded, returns -1).
  virtual int64_t num_tokens() const = 0;
};

// Checks the spec against the data (file exists, token size, vocab bounds, length at least
// one window of seq_len + 1 tokens) and gives a clear error otherwise. A `tokens` path that is a
// folder or a `.manifest` file is a sharded dataset (worker/data/sharded_data_loader.h); one
// token file is read as window_data_loader.h says.
absl::StatusOr<std::unique_ptr<DataLoader>> CreateDataLoader(const DataLoaderOptions& options);

}  // namespace fsdpd
