// Which of several matmul pipelines runs a shape: each candidate is timed kTimedRuns times
// (after a warm-up run) the first time a shape is seen, its fastest run counts (a run slowed by
// another tenant of the GPU says nothing about the block), and the fastest candidate is kept for
// that shape. The
// cooperative-matrix shader's best block depends on the shape and the device (on the H200 one
// block is 2× another on one FFN shape and half as fast on the other: bench/RESULTS.md), so a
// fixed choice loses on some shape wherever it is made.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"

namespace fsdpd::edge {

struct MatmulShape {
  int64_t rows = 0;
  int64_t in_features = 0;
  int64_t out_features = 0;
  bool bias = false;
  // x arrives as fp16 (Backend::MatmulInput): another key, since the candidates that can read
  // it, and their costs (no cast in front), differ from an fp32 x's.
  bool half_input = false;
  bool operator<(const MatmulShape& o) const {
    return std::tie(rows, in_features, out_features, bias, half_input) <
           std::tie(o.rows, o.in_features, o.out_features, o.bias, o.half_input);
  }
};

class MatmulTuner {
 public:
  explicit MatmulTuner(int candidates) : candidates_(candidates) {}

  static constexpr int kTimedRuns = 3;

  // The candidate for `shape`. The first time, `time(i)` runs candidate i and returns its
  // seconds; it is called 1 + kTimedRuns times per candidate (the first run is a warm-up) and
  // an error stops the tuning and is returned. One candidate needs no timing. A candidate that
  // cannot run the shape returns +infinity and is never chosen while another one can (where
  // none can, the first is returned: the caller checks that some candidate fits).
  absl::StatusOr<int> Choose(const MatmulShape& shape,
                             absl::FunctionRef<absl::StatusOr<double>(int)> time);

  // Each tuned shape as "ROWSxOUTxIN[ +bias][ fp16 x]: candidate" in the names given, in shape
  // order.
  std::vector<std::string> Describe(const std::vector<std::string>& names) const;
  // The candidate chosen for each shape tuned so far (for callers whose shapes are not a
  // matmul's: the attention tuner keys on batch·heads, seq, head_dim and causal).
  const std::map<MatmulShape, int>& chosen() const { return chosen_; }

 private:
  int candidates_;
  std::map<MatmulShape, int> chosen_;
};

}  // namespace fsdpd::edge
