#include "edge/matmul_tuner.h"

#include "absl/strings/str_cat.h"

namespace fsdpd::edge {

absl::StatusOr<int> MatmulTuner::Choose(const MatmulShape& shape,
                                        absl::FunctionRef<absl::StatusOr<double>(int)> time) {
  if (candidates_ <= 1) return 0;
  if (auto found = chosen_.find(shape); found != chosen_.end()) return found->second;
  int best = 0;
  double best_seconds = 0.0;
  for (int i = 0; i < candidates_; ++i) {
    absl::StatusOr<double> warm_up = time(i);
    if (!warm_up.ok()) return warm_up.status();
    double fastest = 0.0;
    for (int run = 0; run < kTimedRuns; ++run) {
      absl::StatusOr<double> seconds = time(i);
      if (!seconds.ok()) return seconds.status();
      if (run == 0 || *seconds < fastest) fastest = *seconds;
    }
    if (i == 0 || fastest < best_seconds) {
      best = i;
      best_seconds = fastest;
    }
  }
  chosen_[shape] = best;
  return best;
}

std::vector<std::string> MatmulTuner::Describe(const std::vector<std::string>& names) const {
  std::vector<std::string> lines;
  for (const auto& [shape, index] : chosen_) {
    lines.push_back(absl::StrCat(shape.rows, "x", shape.out_features, "x", shape.in_features,
                                 shape.bias ? " +bias" : "", shape.half_input ? " fp16 x" : "",
                                 ": ",
                                 index < static_cast<int>(names.size()) ? names[index] : "?"));
  }
  return lines;
}

}  // namespace fsdpd::edge
