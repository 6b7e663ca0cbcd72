#include "worker/fsdp/flat_shard_layout.h"

#include <algorithm>

namespace fsdpd {

FlatShardLayout ComputeFlatShardLayout(int64_t numel, int world_size, int rank) {
  FlatShardLayout layout;
  layout.numel = numel;
  layout.shard_numel = (numel + world_size - 1) / world_size;
  layout.padded_numel = layout.shard_numel * world_size;
  layout.shard_offset = layout.shard_numel * rank;
  layout.valid_shard_numel =
      std::clamp<int64_t>(numel - layout.shard_offset, 0, layout.shard_numel);
  return layout;
}

}  // namespace fsdpd
