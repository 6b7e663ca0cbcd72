// SplitMix64's finaliser (Steele, Lea and Flood, 2014): a bijective 64-bit mix whose nearby
// inputs give unrelated outputs. The synthetic data source hashes (seed, row, stream, position)
// with it (worker/data/synthetic_tokens.h), and the model's initialisation seeds each unit's
// engine with it (worker/model/model_config.cc). Both are part of what a seed reproduces, so the
// function must never change.
#pragma once

#include <cstdint>

namespace fsdpd {

constexpr uint64_t SplitMix64(uint64_t value) {
  value += 0x9E3779B97F4A7C15ull;
  value = (value ^ (value >> 30)) * 0xBF58476D1CE4E5B9ull;
  value = (value ^ (value >> 27)) * 0x94D049BB133111EBull;
  return value ^ (value >> 31);
}

}  // namespace fsdpd
