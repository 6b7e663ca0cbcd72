// The synthetic source: uniform random token ids in [0, vocab), like the seed's
// torch.randint inputs and targets. Targets are drawn independently of the inputs (not the
// inputs shifted by one), exactly as the seed does, so the loss cannot fall below ln(vocab)
// by much: synthetic data measures speed, not learning.
//
// Each token is a pure function of (seed, global row, stream, position), computed with a
// counter-based hash (SplitMix64, base/splitmix64.h), so any step is produced directly without
// replaying earlier ones. The global row of (step, rank, row) is
// (step·world_size + rank)·batch_size + row, so ranks draw disjoint rows, and a job that
// keeps batch_size × world_size fixed sees the same global batch at every world size.
#pragma once

#include <cstdint>

namespace fsdpd {

enum class SyntheticStream : uint64_t { kInputs = 0, kTargets = 1 };

// The token at `position` of global row `global_row`, in [0, vocab).
int32_t SyntheticToken(uint64_t seed, uint64_t global_row, SyntheticStream stream,
                       uint64_t position, int64_t vocab);

}  // namespace fsdpd
