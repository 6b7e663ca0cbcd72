// The order in which a sharded token dataset's windows are visited: epoch after epoch, each a
// permutation of all windows drawn from the job's seed. The permutation is a pure function of
// (seed, epoch, size) computed per index without a table (a Feistel network over the next even
// power of two, walking the cycle until the value falls inside), so the sample at any global
// position is found in O(1) time and memory: a resumed job, or another rank, computes the very
// window an uninterrupted job reads at that position, however large the dataset.
#pragma once

#include <cstdint>

namespace fsdpd {

// The window read at `global_row`: row r of the stream is element r mod windows of epoch
// r / windows's permutation. windows must be positive.
uint64_t SampleWindow(uint64_t seed, uint64_t global_row, uint64_t windows);

// Element `index` of the permutation of [0, size) for (seed, epoch); size must be positive and
// index below it.
uint64_t PermuteIndex(uint64_t seed, uint64_t epoch, uint64_t index, uint64_t size);

}  // namespace fsdpd
