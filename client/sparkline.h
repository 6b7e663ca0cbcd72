// A sparkline: a series drawn with the eight block characters ▁▂▃▄▅▆▇█, for `fsdpctl watch`'s
// loss on its progress line, with the range it spans printed beside it.
//
// The scale: the vertical span runs from the drawn values' minimum to their maximum, but is never
// less than kSparklineMinRelativeSpan of their largest magnitude, centred on them. A loss that
// moves by less than that (noise around a plateau, a flat loss) draws nearly flat instead of
// being stretched from ▁ to █; a real fall or rise still fills the height.
#pragma once

#include <cstddef>
#include <deque>
#include <string>
#include <vector>

namespace fsdpd::client {

inline constexpr double kSparklineMinRelativeSpan = 0.10;

// The last `width` values as UTF-8 blocks on the scale above. A flat series is drawn at mid
// height (▄); a value that is not finite (NaN, ±inf) is a space. Empty when there are no values
// or width is 0.
std::string Sparkline(const std::vector<double>& values, size_t width);

// The smallest and largest finite value of the last `width` values; `any` is false when there
// is none.
struct SeriesRange {
  bool any = false;
  double low = 0;
  double high = 0;
};
SeriesRange RangeOf(const std::vector<double>& values, size_t width);

// "2.301–2.456" (four significant digits), or "" when there is no finite value.
std::string FormatRange(const SeriesRange& range);

// Keeps the latest `capacity` values of a series and draws them.
class SparklineSeries {
 public:
  explicit SparklineSeries(size_t capacity) : capacity_(capacity) {}
  void Add(double value);
  void Clear() { values_.clear(); }
  size_t size() const { return values_.size(); }
  std::vector<double> values() const { return {values_.begin(), values_.end()}; }
  // The last `width` values (at most the capacity; 0: all kept).
  std::string Render(size_t width = 0) const;

 private:
  size_t capacity_;
  std::deque<double> values_;
};

}  // namespace fsdpd::client
