// int8 weight-only quantization of a linear layer's weight (docs/edge.md, "int8 weights"):
// symmetric, round to nearest, one fp16 scale per group of kInt8Group consecutive inputs of an
// output row (llama.cpp's Q8_0 layout). Done on the host when the model is placed
// (ModelRunner::Create with WeightFormat::kInt8), from the export's fp32 values.
//
// For a group g of a row: scale = the smallest fp16 value ≥ max|w| / 127 (rounded up, so that
// no |w| / scale exceeds 127 and nothing clamps), q = round(w / scale) (half away from zero) in
// [-127, 127]. A weight then reads back as q · scale, exact in fp32 (7 bits times 11), within
// scale / 2 of w (a group's largest takes ±127, or a little less where the scale is an fp16
// subnormal: max|w| below 127 · 2^-14). A group of zeros has scale 0. The last group of a row is
// short where cols is not a multiple of the group.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace fsdpd::edge {

// The group the shaders read (GROUP in edge/shaders/int8.glsl).
inline constexpr int64_t kInt8Group = 32;

struct Int8Tensor {
  std::string name;  // the export's, for messages
  int64_t rows = 0;  // output features
  int64_t cols = 0;  // input features
  int64_t group = kInt8Group;
  std::vector<int8_t> values;    // rows × cols, row-major
  std::vector<uint16_t> scales;  // fp16 bits, rows × groups_per_row(), row-major

  int64_t groups_per_row() const { return (cols + group - 1) / group; }
  // The scale of element (row, col), as an fp32 value (exact).
  float Scale(int64_t row, int64_t col) const;
  // Every weight as q · scale in fp32: the values every backend multiplies by.
  std::vector<float> Dequantize() const;
};

// `values` (rows × cols, row-major) quantized as above. A NaN or infinite weight, or a group
// whose scale would pass fp16's largest finite value (|w| above 65504 · 127), is
// INVALID_ARGUMENT naming the tensor and the element; so are non-positive sizes.
absl::StatusOr<Int8Tensor> QuantizeInt8(const std::string& name, const float* values, int64_t rows,
                                        int64_t cols, int64_t group = kInt8Group);

// Activations quantized as an int8 dot-product matvec would read them, for measuring what that
// costs before such a shader exists (bench/RESULTS.md, call E13): for each row of x and each
// group of `group` consecutive inputs, scale = max|x| / 127 in fp32 and q = round(x / scale)
// (half away from zero) in [-127, 127], and each x is replaced by q · scale, within scale / 2 of
// it. A group of zeros stays zero; a group holding a NaN or an infinity is left as it is, so
// that it propagates as it would unquantized, and so is one whose scale underflows to zero
// (max|x| below 127 times fp32's smallest subnormal). The CPU backend applies it before each
// product with int8 weights when created with int8_activations (edge/cpu_backend.h).
void QuantizeActivationsInPlace(float* x, int64_t rows, int64_t cols, int64_t group = kInt8Group);

}  // namespace fsdpd::edge
