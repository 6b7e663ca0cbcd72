#include "edge/quantize.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "formats/half.h"

namespace fsdpd::edge {
namespace {

constexpr double kLargestHalf = 65504.0;

// The smallest fp16 value ≥ `value` (value ≥ 0 and at most kLargestHalf), as fp16 bits.
uint16_t HalfAtLeast(double value) {
  uint16_t half = FloatToHalf(static_cast<float>(value));
  // Rounding to fp32 and then to fp16 may land below; the next fp16 up is then the one (positive
  // fp16 bit patterns are ordered as their values).
  while (static_cast<double>(HalfToFloat(half)) < value) ++half;
  return half;
}

}  // namespace

float Int8Tensor::Scale(int64_t row, int64_t col) const {
  return HalfToFloat(scales[static_cast<size_t>(row * groups_per_row() + col / group)]);
}

std::vector<float> Int8Tensor::Dequantize() const {
  std::vector<float> out(values.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const size_t at = static_cast<size_t>(r * cols + c);
      out[at] = static_cast<float>(values[at]) * Scale(r, c);  // exact: 7 bits times 11
    }
  }
  return out;
}

absl::StatusOr<Int8Tensor> QuantizeInt8(const std::string& name, const float* values, int64_t rows,
                                        int64_t cols, int64_t group) {
  if (rows <= 0 || cols <= 0 || group <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("int8 quantization of ", name, ": ", rows, " × ",
                                                   cols, " in groups of ", group,
                                                   " (every size must be positive)"));
  }
  Int8Tensor tensor;
  tensor.name = name;
  tensor.rows = rows;
  tensor.cols = cols;
  tensor.group = group;
  const int64_t groups = tensor.groups_per_row();
  tensor.values.resize(static_cast<size_t>(rows * cols));
  tensor.scales.resize(static_cast<size_t>(rows * groups));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t first = g * group, last = std::min(cols, first + group);
      const float* in = values + r * cols;
      double largest = 0.0;
      int64_t largest_at = first;
      for (int64_t c = first; c < last; ++c) {
        if (!std::isfinite(in[c])) {
          return absl::InvalidArgumentError(absl::StrCat(
              "tensor ", name, " has the non-finite weight ", in[c], " at [", r, ", ", c,
              "]; int8 quantization needs finite weights (the export is damaged, or training "
              "diverged)"));
        }
        if (std::fabs(in[c]) > largest) {
          largest = std::fabs(in[c]);
          largest_at = c;
        }
      }
      const double wanted = largest / 127.0;
      if (wanted > kLargestHalf) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor ", name, " has the weight ", in[largest_at], " at [", r, ", ", largest_at,
            "]: its group's int8 scale would pass fp16's largest value (65504), so it cannot be "
            "quantized to int8; run it with fp16 weights"));
      }
      const uint16_t half = HalfAtLeast(wanted);
      tensor.scales[static_cast<size_t>(r * groups + g)] = half;
      const double scale = HalfToFloat(half);
      for (int64_t c = first; c < last; ++c) {
        // |w| / scale ≤ 127 by the scale's rounding up: nothing to clamp.
        const double q = scale > 0.0 ? std::round(in[c] / scale) : 0.0;
        tensor.values[static_cast<size_t>(r * cols + c)] = static_cast<int8_t>(q);
      }
    }
  }
  return tensor;
}

void QuantizeActivationsInPlace(float* x, int64_t rows, int64_t cols, int64_t group) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t first = 0; first < cols; first += group) {
      float* in = x + r * cols;
      const int64_t last = std::min(cols, first + group);
      float largest = 0.0f;
      bool finite = true;
      for (int64_t c = first; c < last; ++c) {
        finite = finite && std::isfinite(in[c]);
        largest = std::max(largest, std::fabs(in[c]));
      }
      const float scale = largest / 127.0f;
      // Zeros, a NaN or an infinity, or values so small that the scale underflows to zero.
      if (!finite || scale == 0.0f) continue;
      for (int64_t c = first; c < last; ++c) {
        const float q = std::clamp(std::round(in[c] / scale), -127.0f, 127.0f);
        in[c] = q * scale;
      }
    }
  }
}

}  // namespace fsdpd::edge
