#include "worker/data/synthetic_tokens.h"

#include "base/splitmix64.h"

namespace fsdpd {

int32_t SyntheticToken(uint64_t seed, uint64_t global_row, SyntheticStream stream,
                       uint64_t position, int64_t vocab) {
  // Chained hashing keeps distinct (seed, row, stream, position) tuples from colliding the way
  // a plain XOR of the fields would.
  uint64_t state = SplitMix64(seed);
  state = SplitMix64(state ^ global_row);
  state = SplitMix64(state ^ static_cast<uint64_t>(stream));
  state = SplitMix64(state ^ position);
  // Lemire's multiply-shift maps 64 random bits onto [0, vocab); its bias is below
  // vocab / 2^64, far under anything a training run could notice.
  const unsigned __int128 product =
      static_cast<unsigned __int128>(state) * static_cast<uint64_t>(vocab);
  return static_cast<int32_t>(product >> 64);
}

}  // namespace fsdpd
