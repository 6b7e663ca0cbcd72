// An fp32 master weight kept as two 16-bit halves, so that the bf16 parameters compute reads
// are part of the master itself instead of a copy cast from it (docs/architecture.md, "Split
// master weights"):
//   high: the bf16 parameter, the fp32 value rounded to the nearest bf16, ties toward zero;
//   low:  the low 16 bits of the fp32 value.
// Together they hold every bit of the fp32 value: Join(Split(x)) == x for every pattern but
// NaN's. The fp32 pattern's upper half is `high` less one exactly where rounding went up (low
// above 0x8000). Round-to-nearest-even (PyTorch's cast) differs only where low is exactly 0x8000
// and the upper half is odd (one value in 131,072): there `high` keeps the smaller magnitude,
// since rounding away would make the pair ambiguous (65,537 states in 65,536 codes). A NaN's
// high half is the quiet NaN PyTorch's cast gives (0x7fc0 with the sign), so that compute sees
// the NaN (rounding the largest payloads up would wrap them to zero); it joins back to a NaN,
// not necessarily the same payload.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define FSDPD_HOST_DEVICE __host__ __device__
#else
#define FSDPD_HOST_DEVICE
#endif

namespace fsdpd {

struct SplitHalves {
  uint16_t high;
  uint16_t low;
};

FSDPD_HOST_DEVICE inline SplitHalves SplitBits(uint32_t bits) {
  const uint16_t upper = static_cast<uint16_t>(bits >> 16);
  const uint16_t low = static_cast<uint16_t>(bits & 0xffffu);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {  // NaN
    return {static_cast<uint16_t>((upper & 0x8000u) | 0x7fc0u), low};
  }
  return {static_cast<uint16_t>(upper + (low > 0x8000u ? 1u : 0u)), low};
}

FSDPD_HOST_DEVICE inline uint32_t JoinBits(uint16_t high, uint16_t low) {
  const uint16_t upper = static_cast<uint16_t>(high - (low > 0x8000u ? 1u : 0u));
  return (static_cast<uint32_t>(upper) << 16) | low;
}

inline SplitHalves SplitFloat(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return SplitBits(bits);
}

inline float JoinFloat(uint16_t high, uint16_t low) {
  const uint32_t bits = JoinBits(high, low);
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

}  // namespace fsdpd
