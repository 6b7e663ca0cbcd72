#include "client/sparkline.h"

#include <algorithm>
#include <cmath>

namespace fsdpd::client {

std::string Sparkline(const std::vector<double>& values, size_t width) {
  static const char* const kBlocks[] = {"▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"};
  constexpr int kLevels = 8;
  if (values.empty() || width == 0) return "";
  const size_t first = values.size() > width ? values.size() - width : 0;
  double low = INFINITY;
  double high = -INFINITY;
  for (size_t i = first; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) continue;
    low = std::min(low, values[i]);
    high = std::max(high, values[i]);
  }
  std::string line;
  for (size_t i = first; i < values.size(); ++i) {
    const double value = values[i];
    if (!std::isfinite(value)) {
      line += " ";
      continue;
    }
    int level = kLevels / 2 - 1;  // a flat series: mid height
    if (high > low) {
      level = static_cast<int>(std::lround((value - low) / (high - low) * (kLevels - 1)));
      level = std::clamp(level, 0, kLevels - 1);
    }
    line += kBlocks[level];
  }
  return line;
}

void SparklineSeries::Add(double value) {
  values_.push_back(value);
  while (values_.size() > capacity_) values_.pop_front();
}

std::string SparklineSeries::Render() const {
  return Sparkline(std::vector<double>(values_.begin(), values_.end()), capacity_);
}

}  // namespace fsdpd::client
