// What every DataLoader::Batch shares: the arguments checked, then the rank's rows of one global
// step in order, each with its global row. Global batch `step` holds batch_size × world_size
// rows and rank r takes rows [r·batch_size, (r+1)·batch_size), so row `row` of this rank is
// global row (step·world_size + rank)·batch_size + row. It is computed in 128 bits, so it never
// wraps; a source that needs only 64 bits truncates it, which is the same value mod 2^64.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "worker/data/data_loader.h"

namespace fsdpd {

// Calls fill_row(global_row, row_inputs, row_targets) for each of the rank's batch_size rows,
// where row_inputs and row_targets are that row's seq_len tokens of `inputs` and `targets`.
// INVALID_ARGUMENT, before any row, for a negative step or a missing buffer.
template <typename FillRow>
absl::Status FillBatchRows(const DataLoaderOptions& options, int64_t step, int32_t* inputs,
                           int32_t* targets, FillRow&& fill_row) {
  if (step < 0) return absl::InvalidArgumentError(absl::StrCat("negative data step ", step));
  if (inputs == nullptr || targets == nullptr) {
    return absl::InvalidArgumentError("Batch needs input and target buffers");
  }
  const int64_t seq_len = options.data.seq_len();
  const unsigned __int128 first_row =
      (static_cast<unsigned __int128>(step) * static_cast<uint64_t>(options.world_size) +
       static_cast<uint64_t>(options.rank)) *
      static_cast<uint64_t>(options.batch_size);
  for (int64_t row = 0; row < options.batch_size; ++row) {
    fill_row(first_row + static_cast<uint64_t>(row), inputs + row * seq_len,
             targets + row * seq_len);
  }
  return absl::OkStatus();
}

}  // namespace fsdpd
