// The sharded `tokens` source: a folder or manifest of token shards (worker/data/token_shards.h)
// read as one stream of windows of seq_len + 1 tokens, in epochs, each epoch a permutation of
// every window drawn from train.seed (worker/data/sample_order.h). Row `row` of the stream (the
// global row of batch_rows.h) is window SampleWindow(seed, row, windows):
//   inputs  = that window's first seq_len tokens, targets = its last seq_len.
// A batch is a pure function of its index, the shards and the seed, so a job resumed from the
// checkpoint of step s (whose data position is s) reads exactly the rows the uninterrupted job
// reads after step s, mid-epoch or not, at any world size that keeps the global batch.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "worker/data/data_loader.h"

namespace fsdpd {

// Opens and checks every shard of options.data.path (token ids below the vocab, whole tokens,
// confined to options.allowed_roots), then reads rows from them on demand.
absl::StatusOr<std::unique_ptr<DataLoader>> CreateShardedDataLoader(
    const DataLoaderOptions& options);

}  // namespace fsdpd
