// The arithmetic of FSDP's flat sharding: a unit's parameters are one flat buffer, padded to a
// multiple of the world size so that every rank owns an equal contiguous slice.
#pragma once

#include <cstdint>

namespace fsdpd {

struct FlatShardLayout {
  int64_t numel = 0;         // parameters of the unit, unpadded
  int64_t padded_numel = 0;  // numel rounded up to a multiple of world_size
  int64_t shard_numel = 0;   // padded_numel / world_size: every rank's slice
  int64_t shard_offset = 0;  // where this rank's slice starts in the unsharded buffer
  // How many elements of this rank's slice are parameters; the rest is padding, which is
  // zero and stays zero (the optimizer never touches it).
  int64_t valid_shard_numel = 0;
};

// Precondition (checked by the caller's spec validation): world_size ≥ 1, 0 ≤ rank < world_size,
// numel ≥ 0.
FlatShardLayout ComputeFlatShardLayout(int64_t numel, int world_size, int rank);

}  // namespace fsdpd
