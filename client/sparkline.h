// A sparkline: a series drawn with the eight block characters ▁▂▃▄▅▆▇█, for `fsdpctl watch`'s
// loss beside its progress line on a terminal.
#pragma once

#include <cstddef>
#include <deque>
#include <string>
#include <vector>

namespace fsdpd::client {

// The last `width` values as UTF-8 blocks, scaled from their minimum (▁) to their maximum (█).
// A flat series is drawn at mid height (▄); a value that is not finite (NaN, ±inf) is a space.
// Empty when there are no values or width is 0.
std::string Sparkline(const std::vector<double>& values, size_t width);

// Keeps the latest `capacity` values of a series and draws them.
class SparklineSeries {
 public:
  explicit SparklineSeries(size_t capacity) : capacity_(capacity) {}
  void Add(double value);
  void Clear() { values_.clear(); }
  std::string Render() const;

 private:
  size_t capacity_;
  std::deque<double> values_;
};

}  // namespace fsdpd::client
