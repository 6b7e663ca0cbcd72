// fp32 ↔ IEEE fp16, the conversions of the edge runtime's fp16 data: the weights the fp16 path
// stores (VulkanBackend::Weight), the int8 weights' scales (edge/quantize.h) and the bench's
// probe operands.
#pragma once

#include <cstdint>

namespace fsdpd::edge {

// Rounded to nearest even; overflow gives ±inf, NaN stays NaN, tiny values become subnormals
// or ±0.
uint16_t FloatToHalf(float value);
// Exact (every fp16 value is an fp32 value).
float HalfToFloat(uint16_t half);

}  // namespace fsdpd::edge
