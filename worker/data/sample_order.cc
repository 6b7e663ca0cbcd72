#include "worker/data/sample_order.h"

#include "base/splitmix64.h"

namespace fsdpd {
namespace {

constexpr int kRounds = 4;

// Keys of one epoch's network, derived from the seed with a tag of their own so that they are
// unrelated to the synthetic source's and the initialisation's streams of the same seed.
uint64_t RoundKey(uint64_t seed, uint64_t epoch, int round) {
  uint64_t key = SplitMix64(seed ^ 0x7368617264736571ull);  // "shardseq"
  key = SplitMix64(key ^ epoch);
  return SplitMix64(key ^ static_cast<uint64_t>(round));
}

}  // namespace

uint64_t PermuteIndex(uint64_t seed, uint64_t epoch, uint64_t index, uint64_t size) {
  // Half the bits of the smallest even-width power of two holding size: the domain is below
  // 4 · size, so the cycle walk takes fewer than four passes on average.
  int half_bits = 1;
  while (half_bits < 32 && (uint64_t{1} << (2 * half_bits)) < size) ++half_bits;
  const uint64_t mask = (uint64_t{1} << half_bits) - 1;
  uint64_t keys[kRounds];
  for (int round = 0; round < kRounds; ++round) keys[round] = RoundKey(seed, epoch, round);
  uint64_t value = index;
  do {
    uint64_t left = value >> half_bits;
    uint64_t right = value & mask;
    for (int round = 0; round < kRounds; ++round) {
      const uint64_t next = left ^ (SplitMix64(keys[round] ^ right) & mask);
      left = right;
      right = next;
    }
    value = (left << half_bits) | right;
  } while (value >= size);
  return value;
}

uint64_t SampleWindow(uint64_t seed, uint64_t global_row, uint64_t windows) {
  return PermuteIndex(seed, global_row / windows, global_row % windows, windows);
}

}  // namespace fsdpd
