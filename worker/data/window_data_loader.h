// The file sources: `tokens` (flat little-endian uint16/uint32 ids, the nanoGPT and llm.c
// format) and `text` (each byte is a token). Both cut the token stream into windows of
// seq_len + 1 tokens that overlap by one:
//   num_windows = (num_tokens − 1) / seq_len
//   k = (step·world_size·batch_size + rank·batch_size + row) mod num_windows
//   inputs  = tokens[k·seq_len, k·seq_len + seq_len)
//   targets = tokens[k·seq_len + 1, k·seq_len + seq_len + 1)
// The PyTorch fixtures in tests/golden use the same rule.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/data/data_loader.h"

namespace fsdpd {

// Maps the file and checks it once, whole: size a multiple of the token width, at least
// seq_len + 1 tokens, every id below vocab. The full scan costs one pass over the file at
// open, which is cheap for the data sizes this daemon trains on and turns a bad id into an
// error that names its offset instead of an out-of-range embedding lookup mid-run.
// token_bytes is 1 for `text`, 2 or 4 for `tokens`.
absl::StatusOr<std::unique_ptr<DataLoader>> CreateWindowDataLoader(const DataLoaderOptions& options,
                                                                   int token_bytes);

}  // namespace fsdpd
