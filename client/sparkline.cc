#include "client/sparkline.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace fsdpd::client {

SeriesRange RangeOf(const std::vector<double>& values, size_t width) {
  SeriesRange range;
  const size_t first = values.size() > width ? values.size() - width : 0;
  for (size_t i = first; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) continue;
    range.low = range.any ? std::min(range.low, values[i]) : values[i];
    range.high = range.any ? std::max(range.high, values[i]) : values[i];
    range.any = true;
  }
  return range;
}

std::string FormatRange(const SeriesRange& range) {
  if (!range.any) return "";
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.4g–%.4g", range.low, range.high);
  return buffer;
}

std::string Sparkline(const std::vector<double>& values, size_t width) {
  static const char* const kBlocks[] = {"▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"};
  constexpr int kLevels = 8;
  if (values.empty() || width == 0) return "";
  const size_t first = values.size() > width ? values.size() - width : 0;
  const SeriesRange range = RangeOf(values, width);
  // The scale: the range, widened about its middle to the minimum span.
  double low = range.low;
  double high = range.high;
  const double magnitude = std::max(std::fabs(range.low), std::fabs(range.high));
  const double min_span = kSparklineMinRelativeSpan * magnitude;
  if (high - low < min_span) {
    const double middle = (low + high) / 2;
    low = middle - min_span / 2;
    high = middle + min_span / 2;
  }
  std::string line;
  for (size_t i = first; i < values.size(); ++i) {
    const double value = values[i];
    if (!std::isfinite(value)) {
      line += " ";
      continue;
    }
    int level = kLevels / 2 - 1;  // a flat series: mid height
    if (range.high > range.low) {
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

std::string SparklineSeries::Render(size_t width) const {
  return Sparkline(values(), width == 0 ? capacity_ : std::min(width, capacity_));
}

}  // namespace fsdpd::client
