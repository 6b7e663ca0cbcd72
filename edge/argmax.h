// Greedy decoding's pick, the rule every backend's Argmax and the host's own pick share: the
// smallest index whose value is the largest. NaN is never the largest; a row of NaN (or an
// empty one) gives 0. -inf is a value like any other, so a row of -inf gives 0 as well.
#pragma once

#include <cmath>
#include <cstdint>

namespace fsdpd::edge {

inline int32_t GreedyPick(const float* row, int64_t count) {
  int64_t best = -1;
  for (int64_t v = 0; v < count; ++v) {
    if (std::isnan(row[v])) continue;
    if (best < 0 || row[v] > row[best]) best = v;
  }
  return best < 0 ? 0 : static_cast<int32_t>(best);
}

}  // namespace fsdpd::edge
