// fp32 ↔ IEEE fp16: the safetensors reader's F16 tensors (formats/safetensors.cc) and the edge
// runtime's fp16 data (the weights its fp16 path stores, the int8 weights' scales in
// edge/quantize.h, the bench's probe operands).
#pragma once

#include <cstdint>

namespace fsdpd {

// Rounded to nearest even; overflow gives ±inf, NaN stays NaN, tiny values become subnormals
// or ±0.
uint16_t FloatToHalf(float value);
// Exact (every fp16 value is an fp32 value).
float HalfToFloat(uint16_t half);

}  // namespace fsdpd
